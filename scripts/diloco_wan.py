#!/usr/bin/env python3
"""DiLoCo and its data-parallel baseline over a real constrained link (docs/DILOCO.md, "Over a
constrained link"; issue 56, item 2).

    scripts/diloco_wan.py HEADROOM_DILOCO [--workers 4] [--rate 100mbit] [--inner-steps 100]
                          [--rounds 4] [--modes ddp,diloco] [--fragments 4] [--out DIR] [--json]

Builds its own network: a "switch" namespace holding a Linux bridge and the run's etcd, and one
namespace per worker joined to the bridge by a veth pair. Each pair carries a token-bucket rate
limit (`tc qdisc add ... root tbf rate RATE`) on both ends, so every worker's link to the others
is RATE up and RATE down: one site per worker. Nothing touches the host's interfaces; every name
starts with a prefix holding this process's PID (hrw<pid>), and the namespaces (and with them
the bridge and the veths) are removed on the way out, failure or not.

Before training it measures the link: a TCP transfer from worker 0 to worker 1 through the two
rate limits (its throughput must be within 50-110 % of RATE: the limit binds) and the median
TCP connect time (the RTT). Then it runs each mode with the same seed, model, batch and steps:
`headroom-diloco ddp` (fp32 gradients all-reduced every step) and `headroom-diloco worker`
(DiLoCo, int8 pseudo-gradients every H steps), each worker in its namespace, Gloo bound to its
namespace's address (--gloo-host). Two more DiLoCo modes: `diloco-mean` (`--aggregate mean`:
the plain mean by an all-to-all and an all-gather of chunks, no screen) and `diloco-stream`
(`--stream-fragments F`, F = --fragments: streaming DiLoCo, F - 1 of the F fragments sent
while the inner steps go on). Each mode is its own run (`wan-<mode>`). From the workers'
reports: utilisation = compute seconds / wall seconds (summed over the workers), bytes sent
(and the formulas' bytes), and the projection of docs/DILOCO.md ("The projection's model") at
the measured step, bandwidth and RTT.

Exit 0 when every mode finished with its hashes agreed and the link measured as limited, 1
otherwise, 77 (one line) where the capability is missing: not root, no `ip` or `tc`, no
network namespaces, no tbf, no etcd.
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUBNET = "10.99.0"  # private to the run's namespaces: the host never sees it
SWITCH_IP = SUBNET + ".1"
ETCD_PORT = 2379
PARAMS = {"tiny": 495360}  # the model's parameters (docs/DILOCO.md, "The model and the data")
MODES = ("ddp", "diloco", "diloco-mean", "diloco-stream")
BLOCK = 256  # the int8 codec's block (src/diloco_core/compress.h, kDefaultBlock)

# Run inside a namespace with `ip netns exec`: a sink that counts bytes, and a source that sends
# them and reports the throughput the receiver saw.
SINK = r"""
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(64)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    if c.recv(1) == b"x":  # a connect-time probe: answer and go on
        c.sendall(b"y"); c.close(); continue
    n = 1; t0 = time.monotonic()
    while True:
        b = c.recv(1 << 16)
        if not b: break
        n += len(b)
    t = time.monotonic() - t0
    c.close()
    print(f"{n} {t}", flush=True)
    break
"""
SOURCE = r"""
import socket, statistics, sys, time
host, port, nbytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rtts = []
for _ in range(20):
    t0 = time.monotonic(); c = socket.create_connection((host, port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.sendall(b"x"); c.recv(1); rtts.append(time.monotonic() - t0); c.close()
c = socket.create_connection((host, port)); c.sendall(b"d")
chunk = b"\0" * (1 << 16); left = nbytes
while left > 0:
    c.sendall(chunk[:min(left, len(chunk))]); left -= len(chunk)
c.close()
print(statistics.median(rtts) / 2, flush=True)  # a connect and a 1-byte exchange: 2 RTT
"""


def skip(why):
    print(f"SKIP: diloco_wan: {why}")
    sys.exit(77)


def sh(*args, check=True):
    r = subprocess.run(list(args), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip()}")
    return r


def rate_bytes_per_s(rate):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(k|m|g)bit", rate.lower())
    if not m:
        raise SystemExit(f"diloco_wan: --rate {rate}: want e.g. 100mbit or 1gbit")
    return float(m.group(1)) * {"k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8


def capability():
    if os.geteuid() != 0:
        skip("not root (network namespaces and tc need it)")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}"):
            skip(f"no `{tool}` (iproute2)")
    if not os.path.exists("/usr/bin/etcd"):
        skip("no /usr/bin/etcd (etcd-server)")


class Net:
    """The namespaces: <prefix>s (bridge br0 and etcd) and <prefix>w<i> (worker i)."""

    def __init__(self, prefix, workers, rate):
        self.prefix, self.workers, self.rate = prefix, workers, rate
        self.switch = prefix + "s"
        self.made = []

    def ns(self, i):
        return f"{self.prefix}w{i}"

    @staticmethod
    def ip_of(i):
        return f"{SUBNET}.{10 + i}"

    def up(self):
        r = sh("ip", "netns", "add", self.switch, check=False)
        if r.returncode != 0:
            skip(f"cannot make a network namespace: {r.stderr.strip()}")
        self.made.append(self.switch)
        s = self.switch
        sh("ip", "-n", s, "link", "set", "lo", "up")
        sh("ip", "-n", s, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", s, "addr", "add", f"{SWITCH_IP}/24", "dev", "br0")
        sh("ip", "-n", s, "link", "set", "br0", "up")
        bps = rate_bytes_per_s(self.rate)
        # The bucket: 10 ms at the rate, at least 128 KiB (veth hands tbf 64 KiB GSO packets,
        # and a packet larger than the bucket is dropped); a queue of at most 50 ms.
        burst = str(max(131072, int(bps / 100)))
        for i in range(self.workers):
            w = self.ns(i)
            sh("ip", "netns", "add", w)
            self.made.append(w)
            # Made in the switch namespace, its peer moved straight into the worker's.
            sh("ip", "-n", s, "link", "add", f"s{i}", "type", "veth", "peer", "name", "eth0",
               "netns", w)
            sh("ip", "-n", s, "link", "set", f"s{i}", "master", "br0")
            sh("ip", "-n", s, "link", "set", f"s{i}", "up")
            sh("ip", "-n", w, "link", "set", "lo", "up")
            sh("ip", "-n", w, "addr", "add", f"{self.ip_of(i)}/24", "dev", "eth0")
            sh("ip", "-n", w, "link", "set", "eth0", "up")
            for where, dev in ((w, "eth0"), (s, f"s{i}")):
                r = sh("tc", "-n", where, "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                       self.rate, "burst", burst, "latency", "50ms", check=False)
                if r.returncode != 0:
                    skip(f"tc tbf refused: {r.stderr.strip()}")

    def down(self):
        for n in reversed(self.made):
            # A process still inside (none, unless this script was interrupted): stopped by PID.
            for pid in sh("ip", "netns", "pids", n, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            sh("ip", "netns", "del", n, check=False)
        self.made = []

    def exec_argv(self, ns, argv):
        return ["ip", "netns", "exec", ns] + argv


def stop(procs):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def measure_link(net, out):
    """Throughput worker 0 -> worker 1 (through both limits) and the RTT."""
    nbytes = int(max(4e6, rate_bytes_per_s(net.rate) * 1.5))
    sink = subprocess.Popen(net.exec_argv(net.ns(1), [sys.executable, "-c", SINK,
                                                      net.ip_of(1), "5001"]),
                            stdout=subprocess.PIPE, text=True)
    try:
        if sink.stdout.readline().strip() != "ready":
            raise RuntimeError("the link's sink did not start")
        src = subprocess.run(net.exec_argv(net.ns(0), [sys.executable, "-c", SOURCE,
                                                       net.ip_of(1), "5001", str(nbytes)]),
                             capture_output=True, text=True, timeout=120)
        if src.returncode != 0:
            raise RuntimeError(f"the link's source failed: {src.stderr.strip()}")
        n, t = sink.stdout.readline().split()
        sink.wait(timeout=10)
    finally:
        stop([sink])
    return {"bytes": int(n), "seconds": float(t), "bytes_per_s": int(n) / float(t),
            "rtt_s": float(src.stdout.strip())}


def start_etcd(net, tmp):
    url = f"http://{SWITCH_IP}:{ETCD_PORT}"
    log = open(os.path.join(tmp, "etcd.log"), "w")
    p = subprocess.Popen(net.exec_argv(net.switch, [
        "/usr/bin/etcd", "--name=wan", f"--data-dir={tmp}/etcd", f"--listen-client-urls={url}",
        f"--advertise-client-urls={url}", f"--listen-peer-urls=http://{SWITCH_IP}:2380",
        f"--initial-advertise-peer-urls=http://{SWITCH_IP}:2380",
        f"--initial-cluster=wan=http://{SWITCH_IP}:2380", "--logger=zap", "--log-outputs=stderr"]),
        stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if p.poll() is not None:
            raise RuntimeError(f"etcd exited ({p.returncode}); see {tmp}/etcd.log")
        # Asked from the switch namespace (this process is in the host's).
        r = subprocess.run(net.exec_argv(net.switch, [
            sys.executable, "-c",
            f"import urllib.request; urllib.request.urlopen('{url}/health', timeout=1)"]),
            capture_output=True)
        if r.returncode == 0:
            return p, url
        time.sleep(0.2)  # polling etcd's health: a readiness probe, not synchronisation by time
    raise RuntimeError("etcd did not answer within 30 s")


def run_mode(net, a, mode, url, out, timeout_s):
    d = os.path.join(out, mode)
    os.makedirs(d, exist_ok=True)
    procs = []
    t0 = time.monotonic()
    try:
        for i in range(a.workers):
            argv = [a.binary, "ddp" if mode == "ddp" else "worker", "--etcd", url,
                    "--run", f"wan-{mode}", "--name", f"worker-{i}", "--out", d,
                    "--gloo-host", net.ip_of(i), "--data", a.data, "--model", a.model,
                    "--inner-steps", str(a.inner_steps), "--rounds", str(a.rounds),
                    "--batch", str(a.batch), "--seq-len", str(a.seq_len), "--threads", "1",
                    "--seed", str(a.seed), "--start-workers", str(a.workers),
                    "--round-deadline-s", "120", "--collective-timeout-s", "60",
                    "--val-windows", str(a.val_windows), "--json"]
            if mode == "diloco-mean":
                argv += ["--aggregate", "mean"]
            elif mode == "diloco-stream":
                argv += ["--stream-fragments", str(a.fragments)]
            log = open(os.path.join(d, f"worker-{i}.log"), "w")
            procs.append(subprocess.Popen(net.exec_argv(net.ns(i), argv), stdout=log,
                                          stderr=subprocess.STDOUT))
        for p in procs:
            left = timeout_s - (time.monotonic() - t0)
            p.wait(timeout=max(1.0, left))
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{mode}: the workers did not finish within {timeout_s} s ({d})")
    finally:
        stop(procs)
    bad = [i for i, p in enumerate(procs) if p.returncode != 0]
    if bad:
        raise RuntimeError(f"{mode}: worker(s) {bad} failed; see {d}/worker-N.log")
    workers = []
    for i in range(a.workers):
        with open(os.path.join(d, f"worker-{i}.json")) as f:
            workers.append(json.load(f))
    return summarise(mode, workers, time.monotonic() - t0)


def summarise(mode, workers, elapsed_s):
    sec = [w["worker"]["seconds"] for w in workers]
    compute = sum(s["compute"] for s in sec)
    wall = sum(s["wall"] for s in sec)
    steps = [w["worker"]["rounds_contributed"] * w["inner_steps"] for w in workers]
    return {
        "mode": mode,
        "rounds": workers[0]["rounds"],
        "inner_steps": workers[0]["inner_steps"],
        # The last round's donor measured it; the others report -1.
        "final_val_loss": max(w["final_val_loss"] for w in workers),
        "hashes_agreed": all(w["hashes_agreed"] for w in workers),
        "bytes_sent_total": sum(w["bytes_sent_total"] for w in workers),
        "bytes_sent_per_worker": [w["bytes_sent_total"] for w in workers],
        "compute_s": compute,
        "wall_s": wall,
        "communicate_s": sum(s["communicate"] for s in sec),
        "wait_s": sum(s["wait"] for s in sec),
        "utilisation": compute / wall if wall > 0 else 0.0,
        "utilisation_per_worker": [s["compute"] / s["wall"] for s in sec],
        # Wall seconds of computing per inner step (the donor's validation included, as the
        # accounting counts it): the projection's step.
        "step_s": compute / sum(steps) if sum(steps) else 0.0,
        "elapsed_s": elapsed_s,
    }


def frame_bytes(count):
    """An int8 frame of `count` values (docs/DILOCO.md, "Compression")."""
    return 28 + 8 + 4 * -(-count // BLOCK) + count + 32


def chunk_values(n, k):
    """`--aggregate mean`'s chunk: whole blocks, the same for every one of the k
    (src/diloco_core/scatter.h, ChunkValues)."""
    blocks = max(1, -(-n // BLOCK))
    return -(-blocks // k) * BLOCK


def fragment_sizes(n, f):
    """Streaming's F fragments of n values, on block boundaries (src/diloco/stream.h)."""
    blocks = -(-n // BLOCK)
    edges = [min(n, blocks * i // f * BLOCK) for i in range(f)] + [n]
    return [edges[i + 1] - edges[i] for i in range(f)]


def bytes_formula(mode, k, n, h, rounds, fragments):
    """Bytes every worker sends over the run, by the formulas (each member sends what it
    receives): the all-gather (k - 1) frames a round; the mean (k - 1) chunk frames (the
    all-to-all) and (k - 1) mean frames, each a chunk frame + k reason bytes; streaming the
    all-gather of each fragment, where round 0 sends its last fragment only (no group to stream
    on yet) and every later round all F."""
    if mode == "ddp":
        return rounds * h * 2 * (k - 1) * 4 * n // k
    if mode == "diloco-mean":
        chunk = frame_bytes(chunk_values(n, k))
        return rounds * (k - 1) * (chunk + chunk + k)
    if mode == "diloco-stream":
        frames = [frame_bytes(c) for c in fragment_sizes(n, fragments)]
        return (k - 1) * (rounds * frames[-1] + (rounds - 1) * sum(frames[:-1]))
    return rounds * (k - 1) * frame_bytes(n)


def projection(mode, step_s, h, k, n, bandwidth, rtt, fragments=1):
    """docs/DILOCO.md, "The projection's model": nothing overlapped, but streaming's fragments.

    ddp, per step:   2 (k - 1) (4n/k / bandwidth + RTT/2)
    diloco, a round: (k - 1) (frame(n) / bandwidth + RTT/2) + 9 RTT of coordination
    diloco-mean:     2 (k - 1) (chunk frame / bandwidth + RTT/2) + 9 RTT: an all-to-all then an
                     all-gather, each (k - 1) frames of 1/k of the model (a ring, one frame a step)
    diloco-stream:   (k - 1) (frame(last fragment) / bandwidth + RTT/2) + 9 RTT: only the round's
                     last fragment (1/F of the model) blocks; each of the other F - 1 is sent
                     while ~H/F inner steps go on, and blocks only for what its all-gather takes
                     beyond them: + sum over f < F - 1 of max(0, (k - 1) (frame(f) / bandwidth +
                     RTT/2) - H/F step), 0 on these runs' links. The CPU the overlapped sends
                     take from the inner steps is not counted (the link only, as for the rest).
    """
    if mode == "ddp":
        exchange = 2 * (k - 1) * (4 * n / k / bandwidth + rtt / 2)
        return step_s / (step_s + exchange)
    compute = h * step_s
    if mode == "diloco-mean":
        exchange = 2 * (k - 1) * (frame_bytes(chunk_values(n, k)) / bandwidth + rtt / 2)
    elif mode == "diloco-stream":
        frames = [frame_bytes(c) for c in fragment_sizes(n, fragments)]
        exchange = (k - 1) * (frames[-1] / bandwidth + rtt / 2)
        overlap = h / fragments * step_s
        exchange += sum(max(0.0, (k - 1) * (f / bandwidth + rtt / 2) - overlap)
                        for f in frames[:-1])
    else:
        exchange = (k - 1) * (frame_bytes(n) / bandwidth + rtt / 2)
    coordination = 9 * rtt
    return compute / (compute + exchange + coordination)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binary", help="headroom-diloco")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--rate", default="100mbit", help="each worker's link, each way (tc's units)")
    ap.add_argument("--modes", default="ddp,diloco", help="of " + ",".join(MODES))
    ap.add_argument("--fragments", type=int, default=4,
                    help="diloco-stream's --stream-fragments (at least 2)")
    ap.add_argument("--model", default="tiny", choices=sorted(PARAMS))
    ap.add_argument("--inner-steps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--val-windows", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default=os.path.join(ROOT, "build", "corpus"))
    ap.add_argument("--out", help="keep the workers' reports and logs here (default: a temp dir)")
    ap.add_argument("--prefix", help="namespace prefix (default hrw<pid>)")
    ap.add_argument("--timeout-s", type=float, default=1800, help="per mode")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    a.binary_arg, a.binary = a.binary, os.path.abspath(a.binary)
    a.data = os.path.abspath(a.data)  # the workers run from wherever `ip netns exec` puts them
    modes = a.modes.split(",")
    if any(m not in MODES for m in modes):
        raise SystemExit(f"diloco_wan: --modes {a.modes}: each of {','.join(MODES)}")
    if "diloco-stream" in modes and not 2 <= a.fragments <= min(64, a.inner_steps):
        raise SystemExit("diloco_wan: --fragments: between 2 and min(64, --inner-steps)")
    capability()
    if not os.path.exists(os.path.join(a.data, "train.txt")):
        skip(f"no corpus in {a.data} (scripts/setup.sh builds it)")
    if a.workers < 2:
        raise SystemExit("diloco_wan: --workers: at least 2")
    prefix = a.prefix or f"hrw{os.getpid()}"
    if not re.fullmatch(r"[a-z0-9]{1,10}", prefix):
        raise SystemExit("diloco_wan: --prefix: 1-10 of [a-z0-9]")
    tmp = tempfile.mkdtemp(prefix="headroom-wan-")
    out = os.path.abspath(a.out) if a.out else tmp
    net = Net(prefix, a.workers, a.rate)
    etcd = None
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

    def interrupted(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for s in old:
        signal.signal(s, interrupted)
    result = {"workers": a.workers, "rate": a.rate, "model": a.model, "seed": a.seed,
              "inner_steps": a.inner_steps, "rounds": a.rounds, "batch": a.batch,
              "seq_len": a.seq_len, "fragments": a.fragments, "namespaces": [], "runs": []}
    ok = True
    try:
        net.up()
        result["namespaces"] = list(net.made)
        link = measure_link(net, out)
        result["link"] = link
        limit = rate_bytes_per_s(a.rate)
        result["link"]["limited"] = 0.5 * limit <= link["bytes_per_s"] <= 1.1 * limit
        ok &= result["link"]["limited"]
        etcd, url = start_etcd(net, tmp)
        n = PARAMS[a.model]
        for mode in modes:
            r = run_mode(net, a, mode, url, out, a.timeout_s)
            r["projected_utilisation"] = projection(mode, r["step_s"], a.inner_steps, a.workers,
                                                    n, link["bytes_per_s"], link["rtt_s"],
                                                    a.fragments)
            r["bytes_formula_total"] = a.workers * bytes_formula(
                mode, a.workers, n, a.inner_steps, a.rounds, a.fragments)
            result["runs"].append(r)
            ok &= r["hashes_agreed"]
    except (RuntimeError, KeyboardInterrupt) as e:
        print(f"diloco_wan: {e}", file=sys.stderr)
        ok = False
    finally:
        if etcd is not None:
            stop([etcd])
        net.down()
        for s, h in old.items():
            signal.signal(s, h)
        left = [l.split()[0] for l in sh("ip", "netns", "list").stdout.splitlines()
                if l.startswith(prefix)]
        result["namespaces_left"] = left
        ok &= not left
        if not a.out:
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp != out:
            shutil.rmtree(tmp, ignore_errors=True)
    result["ok"] = bool(ok)
    if a.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result, a)
    return 0 if ok else 1


def print_table(r, a):
    link = r.get("link")
    if link:
        print(f"link: {a.rate} each way per worker (tc tbf); measured {link['bytes_per_s'] * 8 / 1e6:.1f} "
              f"Mbit/s worker 0 -> 1, RTT {link['rtt_s'] * 1e3:.2f} ms "
              f"({'limited' if link['limited'] else 'NOT LIMITED'})")
    frag = f" --fragments {a.fragments}" if "diloco-stream" in a.modes.split(",") else ""
    print(f"\n`scripts/diloco_wan.py {a.binary_arg} --workers {a.workers} "
          f"--rate {a.rate}{frag}` ({a.workers} workers, {a.model} model, seed {a.seed}, "
          f"{a.rounds} x {a.inner_steps} inner steps of {a.batch} x {a.seq_len} bytes each)\n")
    print("| run | H | step (compute s) | wall per worker (s) | bytes sent | in collectives | "
          "waiting for peers | utilisation (compute / wall) | projected | final val loss |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for x in r["runs"]:
        name = {"ddp": "ddp (fp32 gradients every step)", "diloco": "diloco, int8",
                "diloco-mean": "diloco, int8, mean",
                "diloco-stream": f"diloco, int8, streamed ({a.fragments} fragments)"}[x["mode"]]
        h = 1 if x["mode"] == "ddp" else x["inner_steps"]
        print(f"| {name} | {h} | {x['step_s']:.3f} | {x['wall_s'] / a.workers:.1f} | "
              f"{x['bytes_sent_total']:,} | {x['communicate_s'] / x['wall_s'] * 100:.1f} % | "
              f"{x['wait_s'] / x['wall_s'] * 100:.1f} % | {x['utilisation'] * 100:.1f} % | "
              f"{x['projected_utilisation'] * 100:.1f} % | {x['final_val_loss']:.4f} |")
    print(f"\nnamespaces made: {len(r['namespaces'])}, left: {len(r['namespaces_left'])}; "
          f"{'ok' if r['ok'] else 'FAILED'}")


if __name__ == "__main__":
    sys.exit(main())
