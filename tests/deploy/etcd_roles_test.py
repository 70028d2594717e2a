#!/usr/bin/env python3
"""deploy/etcd-roles.sh against a real etcd this test starts (free loopback ports, a temporary
directory, stopped by PID pass or fail): after it, with auth on, an agent's user writes its own
member and ack keys and reads its own grant, and nothing else of the site; the coordinator's user
reads and writes the site's prefix and nothing outside it; a second run (one more agent) keeps
the first; bad arguments exit 2 in one line. Exit 77 (skipped) without etcd or etcdctl."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ETCD, ETCDCTL = "/usr/bin/etcd", "/usr/bin/etcdctl"
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy",
                      "etcd-roles.sh")


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def main():
    if not (os.access(ETCD, os.X_OK) and os.access(ETCDCTL, os.X_OK)):
        print("etcd_roles_test: skipped: etcd or etcdctl is not installed", file=sys.stderr)
        return 77
    tmp = tempfile.mkdtemp(prefix="headroom-etcd-roles-")
    client, peer = free_ports(2)
    url = f"http://127.0.0.1:{client}"
    etcd = subprocess.Popen(
        [ETCD, "--name", "m0", "--data-dir", f"{tmp}/data", "--listen-client-urls", url,
         "--advertise-client-urls", url, "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}", "--initial-cluster",
         f"m0=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/etcd.log", "w"))
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)

    def ctl(user, *args, stdin=None):
        env = dict(os.environ, ETCDCTL_API="3")
        if user:
            env["ETCDCTL_USER"] = user
        return subprocess.run([ETCDCTL, "--endpoints", url, *args], env=env, input=stdin,
                              capture_output=True, text=True, timeout=20)

    try:
        deadline = time.monotonic() + 20
        while ctl(None, "endpoint", "health").returncode != 0:
            if time.monotonic() > deadline:
                print("etcd_roles_test: etcd did not start", file=sys.stderr)
                return 1
            time.sleep(0.05)
        for name, pw in [("root", "pw-root"), ("coord", "pw-coord"), ("a1", "pw-a1"),
                         ("a2", "pw-a2")]:
            with open(f"{tmp}/{name}.pw", "w") as f:
                f.write(pw + "\n")
        run = lambda *args: subprocess.run(["bash", SCRIPT, *args], capture_output=True,
                                           text=True, timeout=60)
        base = ["--endpoints", url, "--site", "s", "--root-password-file", f"{tmp}/root.pw",
                "--coordinator", f"coord:{tmp}/coord.pw"]
        first = run(*base, "--agent", f"a1:j1:{tmp}/a1.pw", "--enable-auth")
        check(first.returncode == 0, f"first run: {first.returncode} {first.stderr}")
        check("auth enabled" in first.stdout, f"first run: {first.stdout}")
        # A second run, with auth on: one more agent; the first keeps its role.
        second = run(*base, "--agent", f"a2:j2:{tmp}/a2.pw")
        check(second.returncode == 0, f"second run: {second.returncode} {second.stderr}")

        a1 = "a1:pw-a1"
        check(ctl(a1, "put", "/headroom/s/members/j1", "{}").returncode == 0, "a1 writes its member")
        check(ctl(a1, "put", "/headroom/s/acks/j1", "{}").returncode == 0, "a1 writes its ack")
        check(ctl(a1, "get", "/headroom/s/grants/j1").returncode == 0, "a1 reads its grant")
        for key in ["/headroom/s/grants/j1", "/headroom/s/ledger", "/headroom/s/members/j2",
                    "/headroom/s/acks/j2", "/headroom/s/leader", "/headroom/s/target"]:
            check(ctl(a1, "put", key, "{}").returncode != 0, f"a1 must not write {key}")
        check(ctl(a1, "get", "/headroom/s/ledger").returncode != 0, "a1 must not read the ledger")
        check(ctl(a1, "get", "/headroom/s/grants/j2").returncode != 0,
              "a1 must not read j2's grant")
        check(ctl("a2:pw-a2", "put", "/headroom/s/members/j2", "{}").returncode == 0,
              "a2 writes its member")
        coord = "coord:pw-coord"
        check(ctl(coord, "put", "/headroom/s/ledger", "{}").returncode == 0, "coord writes the ledger")
        check(ctl(coord, "get", "/headroom/s/", "--prefix").returncode == 0, "coord reads the site")
        check(ctl(coord, "put", "/headroom/other/ledger", "{}").returncode != 0,
              "coord must not write another site")
        check(ctl(None, "get", "/headroom/s/ledger").returncode != 0, "no user: refused")

        for bad in [["--site", "s"], base + ["--agent", "a3:j3"], base + ["--bogus"],
                    ["--endpoints", url, "--site", "a/b", "--root-password-file",
                     f"{tmp}/root.pw", "--coordinator", f"coord:{tmp}/coord.pw"]]:
            r = run(*bad)
            check(r.returncode == 2 and r.stderr.count("\n") == 1,
                  f"bad arguments {bad}: exit {r.returncode}, stderr {r.stderr!r}")
    finally:
        etcd.kill()
        etcd.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print(f"etcd_roles_test: FAILED: {f}", file=sys.stderr)
    if not failures:
        print("etcd_roles_test: every check passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
