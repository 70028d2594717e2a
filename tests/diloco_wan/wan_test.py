#!/usr/bin/env python3
"""DiLoCo and DDP over a real constrained link, in brief (scripts/diloco_wan.py; docs/DILOCO.md,
"Over a constrained link"): 2 workers, each in its own network namespace behind a 100 Mbit/s
token bucket, DDP, DiLoCo and streaming DiLoCo (4 fragments) (H = 20, 2 rounds) on the same
seed.

Checks: the namespaces were made (a switch and one per worker) and are all gone afterwards; the
rate limit binds (a TCP transfer through it runs at 50-110 % of 100 Mbit/s); every mode
finishes with its hashes agreed; the bytes are the formulas' (docs/DILOCO.md, "Compression";
streaming: round 0 sends its last fragment only, round 1 all four, the first three during the
round on round 0's group); DiLoCo's utilisation is above DDP's. Exit 77 with one line where
the capability is missing (not root, no ip/tc, no namespaces, no etcd): the script's own skip.

    wan_test.py HEADROOM_DILOCO
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K, H, R, N = 2, 20, 2, 495360  # workers, inner steps, rounds, the tiny model's parameters
F = 4  # streaming's fragments
MODES = {"ddp", "diloco", "diloco-stream"}


def frame(count):
    """An int8 frame of `count` values (docs/DILOCO.md, "Compression")."""
    return 28 + 8 + 4 * -(-count // 256) + count + 32


def remove_leftovers(prefix):
    """Whatever a killed script left: the processes in our namespaces (by PID), then them."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for ns in [l.split()[0] for l in listed.splitlines() if l.startswith(prefix)]:
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
        for pid in pids.split():
            try:
                os.kill(int(pid), 9)
            except (ProcessLookupError, ValueError):
                pass
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        print(f"removed a namespace left behind: {ns}")


def main():
    binary = sys.argv[1]
    prefix = f"hrwt{os.getpid() % 100000}"
    script = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "scripts", "diloco_wan.py"), binary, "--workers",
         str(K), "--rate", "100mbit", "--inner-steps", str(H), "--rounds", str(R), "--modes",
         ",".join(sorted(MODES)), "--fragments", str(F), "--prefix", prefix, "--timeout-s", "200",
         "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = script.communicate(timeout=280)
    except subprocess.TimeoutExpired:
        script.terminate()  # the script removes its namespaces on SIGTERM
        out, err = script.communicate(timeout=30)
    finally:
        if script.poll() is None:
            script.kill()
            script.wait()
        remove_leftovers(prefix)
    p = subprocess.CompletedProcess(script.args, script.returncode, out, err)
    if p.returncode == 77:
        print(p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "SKIP")
        return 77
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    try:
        r = json.loads(p.stdout)
    except json.JSONDecodeError:
        print(f"FAIL: no JSON from diloco_wan.py (rc {p.returncode}):\n{p.stdout}\n{p.stderr}")
        return 1
    # Independently of the script's own check: nothing of ours is left on the host.
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    left = [l for l in listed.splitlines() if l.startswith(prefix)]
    check(sorted(r["namespaces"]) == sorted([prefix + "s"] + [f"{prefix}w{i}" for i in range(K)]),
          f"namespaces made: {r['namespaces']}")
    check(not left and not r["namespaces_left"], f"namespaces left behind: {left}")
    link = r.get("link", {})
    check(link.get("limited"), f"the rate limit does not bind: {link}")
    runs = {x["mode"]: x for x in r["runs"]}
    check(set(runs) == MODES, f"runs finished: {sorted(runs)}; stderr: {p.stderr}")
    if set(runs) == MODES:
        for mode, x in runs.items():
            check(x["hashes_agreed"], f"{mode}: hashes disagree")
        check(runs["diloco"]["bytes_sent_total"] == K * R * (K - 1) * frame(N),
              f"diloco bytes {runs['diloco']['bytes_sent_total']}")
        # 1935 blocks of 256 in 4 fragments: 483, 484, 484 and 484 blocks (stream.h).
        frags = [483 * 256, 484 * 256, 484 * 256, N - 1451 * 256]
        streamed = K * (K - 1) * (R * frame(frags[-1]) + (R - 1) * sum(map(frame, frags[:-1])))
        check(runs["diloco-stream"]["bytes_sent_total"] == streamed,
              f"diloco-stream bytes {runs['diloco-stream']['bytes_sent_total']} != {streamed}")
        check(runs["ddp"]["bytes_sent_total"] == K * R * H * (2 * (K - 1) * 4 * N // K),
              f"ddp bytes {runs['ddp']['bytes_sent_total']}")
        check(runs["diloco"]["utilisation"] > runs["ddp"]["utilisation"],
              f"utilisation: diloco {runs['diloco']['utilisation']:.3f} <= ddp "
              f"{runs['ddp']['utilisation']:.3f}")
    check(p.returncode == 0 and r["ok"], f"diloco_wan.py rc {p.returncode}: {p.stderr.strip()}")
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print(f"ok: link {link['bytes_per_s'] * 8 / 1e6:.1f} Mbit/s, utilisation ddp "
          f"{runs['ddp']['utilisation'] * 100:.1f} %, diloco "
          f"{runs['diloco']['utilisation'] * 100:.1f} %, streamed "
          f"{runs['diloco-stream']['utilisation'] * 100:.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
