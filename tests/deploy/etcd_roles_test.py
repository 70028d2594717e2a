#!/usr/bin/env python3
"""deploy/etcd-roles.sh against a real etcd this test starts (free loopback ports, a temporary
directory, every process stopped by its PID pass or fail), auth on:

  - the table: the script's copy equals docs/SITE.md's "Who reads and writes each key", and
    after the script every role in etcd holds exactly its rows of it — roles made earlier by
    hand or by the script before this one (broader permissions) included;
  - the daemons, each under its own user: a real `headroom coordinator` leads; real twin
    `headroom agent`s register, are granted and acknowledge; one is killed and restarted (the new
    one revokes its predecessor's lease); a second agent under a name taken is counted under
    members/<job>@<lease> and takes the name when the first leaves; every agent leaves (its lease
    revoked); no log says "permission denied" (issue 53: under the roles before, registration's
    transaction was refused and every agent stayed at standby);
  - with etcdctl: an agent's user writes its own keys and nothing else — not another job's
    member, duplicate (jobs j1 and j10: the prefix trap), ack or grant, not its own grant, the
    ledger, the leader or the target; the coordinator's user writes its keys and no member, ack
    or other site; a second run (one more agent) keeps the first; bad arguments exit 2 in one
    line.

Usage: etcd_roles_test.py [HEADROOM] (default: ../bin/headroom from the working directory,
which ctest makes build/tests, else build/bin/headroom in the source tree). Exit 77 (skipped)
without etcd or etcdctl."""
import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ETCD, ETCDCTL = "/usr/bin/etcd", "/usr/bin/etcdctl"
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(SOURCE, "deploy", "etcd-roles.sh")
SITE_MD = os.path.join(SOURCE, "docs", "SITE.md")
SITE = "s"
TTL_S = 3
GRANTED_WITHIN_S = 30  # the first ledger waits TTL + 2 periods; a restart waits TTL - margin

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
    return ok


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


def wait_until(f, timeout_s, every_s=0.1):
    deadline = time.monotonic() + timeout_s
    while True:
        v = f()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(every_s)


def find_headroom():
    for path in [sys.argv[1] if len(sys.argv) > 1 else None,
                 os.path.join(os.getcwd(), "..", "bin", "headroom"),
                 os.path.join(SOURCE, "build", "bin", "headroom")]:
        if path and os.access(path, os.X_OK):
            return os.path.abspath(path)
    return None


# --- The table: docs/SITE.md's, the script's, etcd's -------------------------------------------

def docs_table():
    """{(daemon, may, range, key)} from docs/SITE.md's "Who reads and writes each key"."""
    text = open(SITE_MD).read().split("\n### Who reads and writes each key\n", 1)
    if not check(len(text) == 2, "docs/SITE.md: no section 'Who reads and writes each key'"):
        return set()
    rows, started = set(), False
    for line in text[1].splitlines():
        if not line.startswith("|"):
            if started:
                break
            continue
        started = True
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] in ("daemon", "---"):
            continue
        m = re.fullmatch(r"(prefix )?`([^`]+)`", cells[2])
        if not check(m is not None, f"docs/SITE.md: a key cell not understood: {cells[2]!r}"):
            continue
        rows.add((cells[0], cells[1], "prefix" if m.group(1) else "key", m.group(2)))
    return rows


def script_table():
    m = re.search(r'PERMISSIONS="\n(.*?)\n"', open(SCRIPT).read(), re.S)
    if not m:
        return set()
    return {tuple(line.split()) for line in m.group(1).splitlines() if line.strip()}


def prefix_end(key):
    return key[:-1] + chr(ord(key[-1]) + 1)


def expected_permissions(table, daemon, job=""):
    """{(type, key, range_end)} as etcd lists a role made from the table's rows for `daemon`."""
    out = set()
    for who, may, rng, key in table:
        if who != daemon:
            continue
        key = key.replace("<site>", SITE).replace("<job>", job).replace("<run>", job)
        out.add((may.upper(), key, prefix_end(key) if rng == "prefix" else ""))
    return out


def unb64(s):
    return base64.b64decode(s or "").decode()


# --- The processes ------------------------------------------------------------------------------

class Procs:
    def __init__(self, tmp):
        self.tmp, self.all = tmp, []

    def start(self, argv, log, env=None):
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(log, "w"),
                             stdin=subprocess.DEVNULL, env=env)
        self.all.append(p)
        return p

    def stop_all(self):
        for p in self.all:
            if p.poll() is None:
                p.kill()
            p.wait()


def port_in(log, pattern):
    try:
        m = re.search(pattern, open(log).read())
        return int(m.group(1)) if m else None
    except FileNotFoundError:
        return None


class Run:
    def __init__(self, headroom, tmp, etcd_port, procs):
        self.headroom, self.tmp, self.procs = headroom, tmp, procs
        self.etcd_url = f"http://127.0.0.1:{etcd_port}"
        self.etcd_port = etcd_port
        self.logs = []
        self.agents = 0

    def ctl(self, user, *args):
        env = dict(os.environ, ETCDCTL_API="3")
        env.pop("ETCDCTL_USER", None)
        if user:
            env["ETCDCTL_USER"] = user
        return subprocess.run([ETCDCTL, "--endpoints", self.etcd_url, *args], env=env,
                              capture_output=True, text=True, timeout=20)

    def site(self):
        """Every key of the site as root sees it: {key: (value, lease)}; None if unreadable."""
        r = self.ctl("root:pw-root", "get", f"/headroom/{SITE}/", "--prefix", "-w", "json")
        if r.returncode != 0:
            return None
        out = {}
        for kv in json.loads(r.stdout).get("kvs") or []:
            key = unb64(kv["key"])[len(f"/headroom/{SITE}/"):]
            try:
                value = json.loads(unb64(kv.get("value")))
            except json.JSONDecodeError:
                value = None
            out[key] = (value, int(kv.get("lease", 0)))
        return out

    def coordinator(self):
        log = f"{self.tmp}/coordinator.log"
        self.logs.append(log)
        p = self.procs.start(
            [self.headroom, "coordinator", "--etcd", self.etcd_url, "--site", SITE,
             "--site-budget-w", "4000", "--reserve-w", "100", "--period-s", "0.5",
             "--lease-ttl-s", str(TTL_S), "--listen", "127.0.0.1:0", "--etcd-user", "coord",
             "--etcd-password-file", f"{self.tmp}/coord.pw"], log)
        return p, log

    def agent(self, user, job):
        self.agents += 1
        log = f"{self.tmp}/agent{self.agents}-{job}.log"
        self.logs.append(log)
        p = self.procs.start(
            [self.headroom, "agent", "--source", "twin", "--scenario", "a100-7b-tp1",
             "--controller", "pid", "--listen", "127.0.0.1:0",
             "--site-etcd", f"etcd://127.0.0.1:{self.etcd_port}", "--site", SITE, "--job", job,
             "--lease-ttl-s", str(TTL_S), "--etcd-user", user,
             "--etcd-password-file", f"{self.tmp}/{user}.pw"], log)
        port = wait_until(lambda: port_in(log, r"listening on 127\.0\.0\.1:(\d+)"), 20)
        check(port is not None, f"agent {job} ({log}) did not start listening")
        return p, port, log

    def granted(self, job, lease=None):
        """The lease of `job`'s member once its grant is for that lease, admitted, and
        acknowledged — all as etcd has them; with `lease`, only that one."""
        s = self.site() or {}
        member, grant, ack = (s.get(f"{k}/{job}") for k in ("members", "grants", "acks"))
        if not member or (lease is not None and member[1] != lease):
            return None
        held = member[1]
        if not grant or not grant[0] or grant[0].get("lease") != held or not grant[0]["admitted"]:
            return None
        if not ack or not ack[0] or ack[0].get("lease") != held or ack[0]["seq"] != grant[0]["seq"]:
            return None
        return held

    def agent_state(self, port):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/status", timeout=2) as r:
                return (json.loads(r.read().decode()).get("site") or {}).get("state")
        except Exception:
            return None


def stop(p, what):
    """SIGTERM, and its exit status 0 within 20 s."""
    p.send_signal(signal.SIGTERM)
    try:
        check(p.wait(timeout=20) == 0, f"{what} stops cleanly (exit {p.returncode})")
    except subprocess.TimeoutExpired:
        check(False, f"{what} did not stop within 20 s of SIGTERM")


def daemons(run):
    """The coordinator and the agents, each under its own user (docs/SITE.md's table)."""
    coord, coord_log = run.coordinator()
    j1, j1_port, _ = run.agent("a1", "j1")
    j2, j2_port, _ = run.agent("a2", "j2")
    # Register, be granted, acknowledge.
    leases = {}
    for job in ("j1", "j2"):
        leases[job] = wait_until(lambda: run.granted(job), GRANTED_WITHIN_S, 0.2)
        check(leases[job], f"{job}: registered, granted and acknowledged under its agent's role "
                           f"within {GRANTED_WITHIN_S} s: site {run.site()}")
    if not all(leases.values()):
        return
    check(wait_until(lambda: run.agent_state(j1_port) == "granted", 5), "j1's agent: granted")
    s = run.site() or {}
    check("leader" in s and s["leader"][1] != 0, "the coordinator leads (its leader key)")
    check(set((s.get("ledger") or ({}, 0))[0].get("jobs", {})) == {"j1", "j2"},
          f"the ledger admits j1 and j2: {s.get('ledger')}")

    # Restart: j1's agent killed, its lease kept alive meanwhile (as etcd may, for up to a TTL):
    # the new agent registers only by revoking its predecessor's lease, which holds members/j1
    # and acks/j1 — etcd asks write on both of a revoke.
    keeper = run.procs.start(
        [ETCDCTL, "--endpoints", run.etcd_url, "lease", "keep-alive", f"{leases['j1']:x}"],
        f"{run.tmp}/keeper.log", env=dict(os.environ, ETCDCTL_API="3", ETCDCTL_USER="root:pw-root"))
    time.sleep(0.5)
    j1.kill()
    j1.wait()
    j1, j1_port, j1_log = run.agent("a1", "j1")
    again = wait_until(lambda: (lambda l: l if l and l != leases["j1"] else None)(
        run.granted("j1")), GRANTED_WITHIN_S, 0.2)
    check(again, "j1 restarted: registered and granted under a new lease")
    check(re.search(r"is gone: lease [0-9a-f]+ revoked", open(j1_log).read()),
          "j1 restarted: it revoked its predecessor's lease")
    check(wait_until(lambda: keeper.poll() is not None, 5),
          "the predecessor's lease is gone (its keep-alive ended)")
    # A duplicate: a second agent for j2 is counted under members/j2@<its lease>; when the
    # first leaves, it takes the name (deleting its duplicate key) and is granted.
    dup, dup_port, _ = run.agent("a2", "j2")
    dup_key = wait_until(lambda: next(
        (k for k in (run.site() or {}) if k.startswith("members/j2@")), None), 15, 0.2)
    check(dup_key, "the duplicate j2 wrote members/j2@<lease> under j2's role")
    if dup_key:
        dup_lease = (run.site() or {}).get(dup_key, (None, 0))[1]
        check(dup_key == f"members/j2@{dup_lease:x}", f"{dup_key} is on lease {dup_lease:x}")
        standby = wait_until(lambda: ((run.site() or {}).get("ledger") or ({}, 0))[0]
                             .get("standby", {}).get(dup_key[len("members/"):]), 10, 0.2)
        check(standby and standby.get("duplicate"), f"the ledger counts {dup_key}: {standby}")
        stop(j2, "j2's first agent (leaving)")
        took = wait_until(lambda: run.granted("j2", dup_lease), GRANTED_WITHIN_S, 0.2)
        check(took, "the duplicate took the name j2 when its holder left, and is granted")
        check(not any(k.startswith("members/j2@") for k in (run.site() or {})),
              "its duplicate key went in the transaction that took the name")
        check(wait_until(lambda: run.agent_state(dup_port) == "granted", 5),
              "the duplicate's agent: granted")

    # Leave: every agent revokes its own lease; its keys go with it.
    for p, what in [(j1, "j1's agent"), (dup, "j2's second agent"), (j2, "j2's first agent")]:
        if p.poll() is None:
            stop(p, what)
    s = run.site() or {}
    check(not any(k.startswith(("members/", "acks/")) for k in s),
          f"after every agent left, no member or ack key: {sorted(s)}")
    stop(coord, "the coordinator")
    check("leader" not in (run.site() or {}), "the coordinator's leader key went with its lease")


def allowed_and_denied(run):
    """What each user may and may not do, with etcdctl (after the daemons are gone)."""
    a1, coord = "a1:pw-a1", "coord:pw-coord"
    k = lambda key: f"/headroom/{SITE}/{key}"
    for key in ["members/j1", "members/j1@1a", "acks/j1"]:
        check(run.ctl(a1, "put", k(key), "{}").returncode == 0, f"a1 writes {key}")
    check(run.ctl(a1, "get", k("members/j1")).returncode == 0, "a1 reads members/j1")
    check(run.ctl(a1, "get", k("grants/j1")).returncode == 0, "a1 reads its grant")
    check(run.ctl(a1, "del", k("members/j1@1a")).returncode == 0, "a1 deletes its duplicate key")
    for key in ["grants/j1", "grants/j2", "ledger", "leader", "target", "members/j2",
                "members/j2@1a", "acks/j2", "members/j10", "members/j10@1a", "members/j1x",
                "members/", "other"]:
        r = run.ctl(a1, "put", k(key), "{}")
        check(r.returncode != 0 and "permission denied" in r.stderr,
              f"a1 must not write {key}: {r.returncode} {r.stderr.strip()}")
    for key in ["ledger", "leader", "target", "grants/j2", "members/j2", "acks/j2"]:
        check(run.ctl(a1, "get", k(key)).returncode != 0, f"a1 must not read {key}")
    check(run.ctl(a1, "get", k(""), "--prefix").returncode != 0, "a1 must not read the site")
    check(run.ctl("a10:pw-a10", "put", k("members/j10@1a"), "{}").returncode == 0,
          "a10 writes its duplicate key")
    check(run.ctl("a10:pw-a10", "put", k("members/j1@1a"), "{}").returncode != 0,
          "a10 must not write j1's duplicate key")
    check(run.ctl("a2:pw-a2", "put", k("members/j2"), "{}").returncode == 0, "a2 writes its member")

    check(run.ctl(coord, "put", k("ledger"), "{}").returncode == 0, "coord writes the ledger")
    check(run.ctl(coord, "put", k("grants/j1"), "{}").returncode == 0, "coord writes a grant")
    check(run.ctl(coord, "get", k(""), "--prefix").returncode == 0, "coord reads the site")
    for key in ["members/j1", "members/j1@1a", "acks/j1", "other"]:
        check(run.ctl(coord, "put", k(key), "{}").returncode != 0, f"coord must not write {key}")
    check(run.ctl(coord, "put", "/headroom/other/ledger", "{}").returncode != 0,
          "coord must not write another site")
    check(run.ctl(coord, "get", "/headroom/other/ledger").returncode != 0,
          "coord must not read another site")
    check(run.ctl(None, "get", k("ledger")).returncode != 0, "no user: refused")

    # A DiLoCo worker: its run's keys, read and written; nothing of another run or of the site.
    d1 = "d1:pw-d1"
    for key in ["members/w0", "config", "rounds/3/arrive/w0", "gloo/3/w0"]:
        check(run.ctl(d1, "put", f"/headroom-diloco/r1/{key}", "{}").returncode == 0,
              f"d1 writes run r1's {key}")
    check(run.ctl(d1, "get", "/headroom-diloco/r1/members/", "--prefix").returncode == 0,
          "d1 reads run r1's members")
    for key in ["/headroom-diloco/r10/config", "/headroom-diloco/r2/members/w0",
                "/headroom-diloco/r1", k("ledger"), k("members/j1")]:
        r = run.ctl(d1, "put", key, "{}")
        check(r.returncode != 0 and "permission denied" in r.stderr,
              f"d1 must not write {key}: {r.returncode} {r.stderr.strip()}")
    check(run.ctl(d1, "get", "/headroom-diloco/", "--prefix").returncode != 0,
          "d1 must not read every run")


def main():
    if not (os.access(ETCD, os.X_OK) and os.access(ETCDCTL, os.X_OK)):
        print("etcd_roles_test: skipped: etcd or etcdctl is not installed", file=sys.stderr)
        return 77
    headroom = find_headroom()
    if not headroom:
        print("etcd_roles_test: the headroom binary: pass its path (build/bin/headroom)",
              file=sys.stderr)
        return 1
    tmp = tempfile.mkdtemp(prefix="headroom-etcd-roles-")
    client, peer = free_ports(2)
    procs = Procs(tmp)  # the daemons
    url = f"http://127.0.0.1:{client}"
    etcd = Procs(tmp)
    etcd.start(
        [ETCD, "--name", "m0", "--data-dir", f"{tmp}/data", "--listen-client-urls", url,
         "--advertise-client-urls", url, "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}", "--initial-cluster",
         f"m0=http://127.0.0.1:{peer}"], f"{tmp}/etcd.log")
    run = Run(headroom, tmp, client, procs)
    t0 = time.monotonic()
    try:
        if not wait_until(lambda: run.ctl(None, "endpoint", "health").returncode == 0, 20):
            print("etcd_roles_test: etcd did not start", file=sys.stderr)
            return 1
        for name in ["root", "coord", "a1", "a2", "a10", "d1"]:
            with open(f"{tmp}/{name}.pw", "w") as f:
                f.write(f"pw-{name}\n")
            os.chmod(f"{tmp}/{name}.pw", 0o600)

        # The table: the script's copy is the document's.
        table = docs_table()
        check(len(table) >= 8, f"docs/SITE.md: the table has {len(table)} rows")
        in_script = script_table()
        check(in_script == table,
              f"the script's table differs from docs/SITE.md's: only in the script: "
              f"{sorted(in_script - table)}; only in the docs: {sorted(table - in_script)}")

        # Roles made before (the earlier script's broader ones, and one by hand) are brought
        # to the table.
        run.ctl(None, "role", "add", f"headroom-{SITE}-coordinator")
        run.ctl(None, "role", "grant-permission", f"headroom-{SITE}-coordinator", "readwrite",
                f"/headroom/{SITE}/", "--prefix=true")
        run.ctl(None, "role", "add", f"headroom-{SITE}-agent-j1")
        run.ctl(None, "role", "grant-permission", f"headroom-{SITE}-agent-j1", "readwrite",
                f"/headroom/{SITE}/ledger")
        run.ctl(None, "role", "grant-permission", f"headroom-{SITE}-agent-j1", "readwrite",
                f"/headroom/{SITE}/members/j1", "--prefix=true")

        script = lambda *args: subprocess.run(["bash", SCRIPT, *args], capture_output=True,
                                              text=True, timeout=60)
        base = ["--endpoints", url, "--site", SITE, "--root-password-file", f"{tmp}/root.pw",
                "--coordinator", f"coord:{tmp}/coord.pw"]
        first = script(*base, "--agent", f"a1:j1:{tmp}/a1.pw", "--agent",
                       f"a10:j10:{tmp}/a10.pw", "--diloco", f"d1:r1:{tmp}/d1.pw",
                       "--enable-auth")
        check(first.returncode == 0, f"first run: {first.returncode} {first.stderr}")
        check("auth enabled" in first.stdout, f"first run: {first.stdout}")
        check(f"revoked READWRITE on /headroom/{SITE}/ledger" in first.stdout,
              f"first run: says what it revoked: {first.stdout}")
        # A second run, with auth on: one more agent; the first keep their roles.
        second = script(*base, "--agent", f"a2:j2:{tmp}/a2.pw")
        check(second.returncode == 0, f"second run: {second.returncode} {second.stderr}")

        # etcd's roles are the table's rows, no more, no fewer.
        for role, daemon, job in [(f"headroom-{SITE}-coordinator", "coordinator", ""),
                                  (f"headroom-{SITE}-agent-j1", "agent", "j1"),
                                  (f"headroom-{SITE}-agent-j2", "agent", "j2"),
                                  (f"headroom-{SITE}-agent-j10", "agent", "j10"),
                                  ("headroom-diloco-r1", "diloco", "r1")]:
            r = run.ctl("root:pw-root", "role", "get", role, "-w", "json")
            held = set()
            if check(r.returncode == 0, f"role {role}: {r.stderr}"):
                for p in json.loads(r.stdout).get("perm") or []:
                    held.add((["READ", "WRITE", "READWRITE"][p.get("permType", 0)],
                              unb64(p.get("key")), unb64(p.get("range_end"))))
            want = expected_permissions(table, daemon, job)
            check(held == want, f"role {role}: etcd has {sorted(held)}, the table "
                                f"{sorted(want)}")

        daemons(run)
        procs.stop_all()  # the daemons, before etcdctl writes keys they would read
        allowed_and_denied(run)
        for log in run.logs:
            refused = [l for l in open(log).read().splitlines() if "permission denied" in l.lower()]
            check(not refused, f"{os.path.basename(log)}: etcd refused a request: "
                               f"{refused[0][:300] if refused else ''}")

        for bad in [["--site", "s"], base + ["--agent", "a3:j3"], base + ["--bogus"],
                    ["--endpoints", url, "--site", "a/b", "--root-password-file",
                     f"{tmp}/root.pw", "--coordinator", f"coord:{tmp}/coord.pw"],
                    base + ["--agent", f"a3:j@3:{tmp}/a1.pw"]]:
            r = script(*bad)
            check(r.returncode == 2 and r.stderr.count("\n") == 1,
                  f"bad arguments {bad}: exit {r.returncode}, stderr {r.stderr!r}")
    finally:
        procs.stop_all()
        etcd.stop_all()
        if failures:
            for log in run.logs:
                try:
                    lines = open(log).read().splitlines()
                except FileNotFoundError:
                    continue
                print(f"--- {os.path.basename(log)} (last 8 lines)", file=sys.stderr)
                for line in lines[-8:]:
                    print(line[:300], file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print(f"etcd_roles_test: FAILED: {f}", file=sys.stderr)
    if not failures:
        print(f"etcd_roles_test: every check passed ({time.monotonic() - t0:.0f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
