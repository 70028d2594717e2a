#!/usr/bin/env python3
"""Chaos test of a site (docs/SITE.md, "Chaos"): real processes, faults at random, and an
auditor that is not the coordinator.

Starts a 3-member etcd, 2 `headroom coordinator` replicas and 8 twin-mode `headroom agent`s at
20x (the paper's 16-GPU composite), then injects faults at random (seeded): SIGKILL and restart
of an agent; SIGSTOP of an agent for 2-3 lease TTLs, then SIGCONT; SIGKILL of the leading
coordinator (and a new replica); SIGKILL of the etcd leader (and its restart); site budget
decreases and increases; more jobs than the site admits (three extra agents for a few seconds);
a duplicate job name (a second agent under a taken name); a member value the coordinator cannot
read (a newer version, written over an agent's key on its lease); the ledger deleted; etcd wiped
and started empty; a site-budget cut answered 202, then etcd's quorum lost 0.2 s later; an agent restarted with the shipped
--budget-w of 314.6 W per GPU (refused above the floor). Two long faults are drawn only when named
(--kinds) or added (--long-faults K): an agent cut off from etcd (its proxies stop forwarding, no
reset: agent_partition), and an agent SIGSTOPped (agent_frozen_past_ttl), each until the ledger
has forgotten its job (its lease expired, then --forget-after-s and two of its declared steps:
about 2 minutes here) and a few seconds more, then healed or SIGCONTed. After each fault it
waits for the site to be fully allocated again.

The auditor reads only what the agents log (every change of the budget each acts on, with its
term, sequence and lease, and the twin's true power each decision; --site-log) and every
ledger revision (a watch on etcd, each revision timestamped as it arrives). It checks:
  - at every instant, the sum over every agent process at the site -- admitted or not, extra,
    duplicate -- of what it may draw <= site budget - reserve (a job acts on its last logged
    budget until its logged validity; one at standby or fenced draws its standby while its twin
    holds and its floor while a step runs; one silent past its validity -- stopped, dead --
    its floor until the step under way has surely ended, then its standby: its trainer fails
    closed), a newcomer's standby left out for
    its first TTL + 2 periods (the reserve covers it while grants come down), and with it
    <= the site budget itself at every instant;
  - every grant acted on was issued by a ledger of that term (same seq, lease and watts), and
    no agent process acted on a term older than one it had already acted on, unless etcd was
    wiped after it first acted on that one (terms start again with the store's history);
  - the site is back to a full allocation within TTL + 2 periods of each fault (p50/p99);
  - the twins' summed true power is never above the site budget in any 30 s window (of the
    twins' time: 30 s / speed of wall time).
Exit 0 when all hold, 1 otherwise, 77 when etcd is not installed. Prints a table; --json and
--markdown for the docs (make chaos). A run keeps what its audit read besides the logs in
audit_input.json; `--audit DIR` audits a kept run (--keep, or a failed one) again.
"""
import argparse
import collections
import base64
import bisect
import json
import os
import random
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
import urllib.error
import urllib.request

ETCD = "/usr/bin/etcd"
JOBS = ["a100-72b-tp4"] * 2 + ["a100-14b-tp2"] * 2 + ["a100-7b-tp1"] * 4
MAX_NEWCOMER_W = 332.0  # the most standby one fault starts: a 72B job's duplicate (4 x 83 W)
FORGET_AFTER_S = 15.0  # the coordinators' --forget-after-s
# The auditor's bound on the step under way when a process has logged nothing since its budget's
# validity ran out (stopped or dead), in its job's longest steps seen (wall time, from its own
# log): its trainer, failing closed, ends that step on its floor and then holds. A step on the
# floor is slower than those seen on higher grants by at most the ratio of the powers where a
# step's throughput is at least proportional to its power (concave, through zero), so the bound
# is that ratio (the highest budget the job acted on over its floor), and at least twice.
STEP_BOUND_STEPS = 2.0
# Faults that last until the ledger forgets the job (over FORGET_AFTER_S and two of its declared
# steps: about 2 minutes here), drawn only when named (--kinds) or added (--long-faults).
LONG_KINDS = ["agent_partition", "agent_frozen_past_ttl"]
# The agents the long faults pick: the two 14B jobs, whose declared steps are the shortest (so the
# ledger forgets them soonest) and whose floor (760 W) less their standby (166 W) is more than
# the reserve. When partitions may be drawn they reach etcd through proxies of their own; the
# other agents stay direct, since a proxy turns an etcd member that is down from "connection
# refused" into "connection lost", which changes how the agent's store retries
# (coord/etcd_store.h).
LONG_FAULT_AGENTS = [2, 3]


def b64(s):
    return base64.b64encode(s.encode()).decode()


def unb64(s):
    return base64.b64decode(s).decode()


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


def post(url, body, timeout=2.0):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read().decode())


def get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read().decode())


def wait_until(pred, timeout_s, step_s=0.02):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step_s)
    return None


class Procs:
    """Every process started, stopped by PID at the end, pass or fail."""

    def __init__(self):
        self.all = []

    def start(self, argv, log_path):
        f = open(log_path, "ab")
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        f.close()
        self.all.append(p)
        return p

    def stop_all(self):
        for p in self.all:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                    p.kill()
                except ProcessLookupError:
                    pass
        for p in self.all:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


class Etcd:
    def __init__(self, procs, tmp, n=3):
        self.procs, self.tmp, self.n = procs, tmp, n
        ports = free_ports(2 * n)
        self.client = ports[:n]
        self.peer = ports[n:]
        self.names = [f"m{i}" for i in range(n)]
        self.cluster = ",".join(f"m{i}=http://127.0.0.1:{self.peer[i]}" for i in range(n))
        self.p = [None] * n
        for i in range(n):
            self.start(i, "new")
        for i in range(n):
            if not wait_until(lambda i=i: self.healthy(i), 20, 0.05):
                raise RuntimeError(f"etcd member {i} did not start: see {tmp}/etcd{i}.log")

    def url(self, i):
        return f"http://127.0.0.1:{self.client[i]}"

    def endpoints(self):
        return ",".join(self.url(i) for i in range(self.n))

    def start(self, i, state):
        argv = [ETCD, "--name", self.names[i], "--data-dir", f"{self.tmp}/etcd{i}",
                "--listen-client-urls", self.url(i), "--advertise-client-urls", self.url(i),
                "--listen-peer-urls", f"http://127.0.0.1:{self.peer[i]}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer[i]}",
                "--initial-cluster", self.cluster, "--initial-cluster-state", state,
                "--initial-cluster-token", getattr(self, "token", os.path.basename(self.tmp)),
                "--heartbeat-interval", "100", "--election-timeout", "1000"]
        self.p[i] = self.procs.start(argv, f"{self.tmp}/etcd{i}.log")

    def healthy(self, i):
        try:
            return "header" in post(self.url(i) + "/v3/maintenance/status", {}, 0.5)
        except Exception:
            return False

    def leader(self):
        for i in range(self.n):
            if self.p[i].poll() is not None:
                continue
            try:
                st = post(self.url(i) + "/v3/maintenance/status", {}, 0.5)
                if st.get("leader") and st["leader"] == st["header"]["member_id"]:
                    return i
            except Exception:
                pass
        return None

    def kill(self, i):
        self.p[i].kill()
        self.p[i].wait()

    def wipe(self, generation):
        """Every member killed, its data removed, the cluster started again empty (etcd's state
        lost: the revision back at 1, no keys, no leases) on the same ports."""
        for i in range(self.n):
            self.kill(i)
            shutil.rmtree(f"{self.tmp}/etcd{i}", ignore_errors=True)
        self.token = f"{os.path.basename(self.tmp)}-{generation}"
        for i in range(self.n):
            self.start(i, "new")
        for i in range(self.n):
            wait_until(lambda i=i: self.healthy(i), 20, 0.05)

    def restart(self, i):
        self.start(i, "existing")


class BlackHoleProxy:
    """A TCP proxy on 127.0.0.1 to one etcd member, for one agent. cut() stops forwarding in both
    directions: connections stay open, nothing is closed or reset, and the bytes either side
    sends wait in the kernel's buffers (a connection opened during the cut is accepted and waits
    too); heal() forwards them again, as TCP would after a partition heals. A member that is down
    when a connection is forwarded closes that connection."""

    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        self.open = threading.Event()  # forwarding; cleared while cut
        self.open.set()
        self.closed = False
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def cut(self):
        self.open.clear()

    def heal(self):
        self.open.set()

    def close(self):
        self.closed = True
        self.open.set()
        try:
            self.sock.close()
        except OSError:
            pass

    def accept_loop(self):
        while not self.closed:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(client,), daemon=True).start()

    def serve(self, client):
        self.open.wait()
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=2.0)
            upstream.settimeout(None)
        except OSError:
            client.close()
            return
        pair = (client, upstream)
        threading.Thread(target=self.pump, args=(client, upstream, pair), daemon=True).start()
        self.pump(upstream, client, pair)

    def pump(self, src, dst, pair):
        try:
            while not self.closed:
                self.open.wait()
                ready, _, _ = select.select([src], [], [], 0.2)
                if not ready or not self.open.is_set():
                    continue  # cut between the wait and the read: read nothing
                data = src.recv(65536)
                if not data:
                    break
                self.open.wait()  # read just as the cut began: held until the heal
                dst.sendall(data)
        except (OSError, ValueError):
            pass
        for s in pair:
            try:
                s.close()
            except OSError:
                pass


class LedgerWatch(threading.Thread):
    """Every revision of the ledger key, timestamped on arrival (monotonic)."""

    def __init__(self, etcd, key):
        super().__init__(daemon=True)
        self.etcd, self.key = etcd, key
        self.revisions = []  # (t_mono, mod_revision, ledger dict)
        self.last_rev = 0
        self.cluster = None  # the etcd cluster id the revisions are of (a wipe makes another)
        self.stop = False
        self.lock = threading.Lock()

    def run(self):
        i = 0
        while not self.stop:
            url = self.etcd.url(i % self.etcd.n) + "/v3/watch"
            i += 1
            body = {"create_request": {"key": b64(self.key), "start_revision": str(self.last_rev + 1)}}
            try:
                req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
                # A quiet watch is reopened every 10 s from the last revision seen: a stream
                # opened on a member that never serves (etcd restarting) cannot hang the audit.
                with urllib.request.urlopen(req, timeout=10) as r:
                    for line in r:
                        if self.stop:
                            return
                        msg = json.loads(line.decode())
                        # A new cluster (etcd wiped and started empty): its revisions start
                        # again, so the watch does too, from its first -- at once, not after a
                        # quiet stream opened past them times out.
                        cid = msg.get("result", {}).get("header", {}).get("cluster_id")
                        if cid is not None and cid != self.cluster:
                            fresh = self.cluster is not None
                            with self.lock:
                                self.cluster = cid
                                if fresh:
                                    self.last_rev = 0
                            if fresh:
                                break
                        for ev in msg.get("result", {}).get("events", []) or []:
                            kv = ev.get("kv", {})
                            if ev.get("type") == "DELETE" or "value" not in kv:
                                continue
                            rev = int(kv["mod_revision"])
                            try:
                                ledger = json.loads(unb64(kv["value"]))
                            except Exception:
                                continue
                            # Its epoch: the key's create_revision (what its grants carry).
                            ledger["_epoch"] = int(kv.get("create_revision", 0))
                            with self.lock:
                                self.revisions.append((time.monotonic(), rev, ledger))
                                self.last_rev = max(self.last_rev, rev)
            except Exception:
                time.sleep(0.05)

    def latest(self):
        with self.lock:
            return self.revisions[-1][2] if self.revisions else None


class Agent:
    def __init__(self, chaos, index, job=None, scenario=None, log=None):
        self.chaos, self.index = chaos, index
        self.scenario = scenario or JOBS[index]
        self.job = job or f"job{index}-{self.scenario}"
        self.log = log or f"{chaos.tmp}/{self.job}.site.jsonl"
        self.p = None
        self.stopped = False
        self.killed_at = None  # a transient agent's SIGKILL (its twin dies with it)
        self.proxies = None  # BlackHoleProxy per etcd member, for an agent that may be partitioned

    def start(self, extra=()):
        c = self.chaos
        argv = [c.headroom, "agent", *extra, "--source", "twin", "--scenario", self.scenario,
                "--seed", str(c.seed * 100 + self.index + c.restarts),
                "--controller", "ppo", "--policy", f"{c.source_dir}/policies/{self.scenario}.json",
                "--speed", str(c.speed), "--listen", "127.0.0.1:0",
                "--site-etcd", "etcd://" + ",".join(
                    f"127.0.0.1:{p}" for p in ([x.port for x in self.proxies] if self.proxies
                                               else c.etcd.client)),
                "--site", c.site, "--job", self.job, "--site-log", self.log,
                "--lease-ttl-s", str(c.ttl)]
        self.p = c.procs.start(argv, f"{c.tmp}/{self.job}.log")
        self.stopped = False


class Coordinator:
    def __init__(self, chaos, n, extra=()):
        """Replica n of chaos.site on chaos.etcd; `extra`: more flags (a domain's --parent-*)."""
        self.chaos = chaos
        self.log = f"{chaos.tmp}/coordinator{n}.log"
        argv = [chaos.headroom, "coordinator", "--etcd", chaos.etcd.endpoints(), "--site",
                chaos.site, "--site-budget-w", str(chaos.budget_w), "--reserve-w",
                str(chaos.reserve_w), "--period-s", str(chaos.period_s), "--lease-ttl-s",
                str(chaos.ttl), "--listen", "127.0.0.1:0",
                # Longer than an agent is stopped (3 TTLs) and its validity after: the standby
                # of the jobs the faults start and kill goes within the run.
                "--forget-after-s", f"{FORGET_AFTER_S:g}", *extra]
        chaos.coordinator_logs.append(self.log)
        self.p = chaos.procs.start(argv, self.log)
        self.port = wait_until(self.read_port, 20, 0.02)
        if not self.port:
            raise RuntimeError(f"coordinator did not start: see {self.log}")

    def read_port(self):
        try:
            with open(self.log) as f:
                for line in f:
                    if "listening on http://127.0.0.1:" in line:
                        return int(line.split("listening on http://127.0.0.1:")[1].split("/")[0])
        except FileNotFoundError:
            pass
        return None

    def status(self):
        try:
            return get(f"http://127.0.0.1:{self.port}/v1/status", 1.0)
        except Exception:
            return None


def read_log(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass  # a line cut by SIGKILL
    except FileNotFoundError:
        pass
    return out


class Chaos:
    def __init__(self, args):
        self.headroom = os.path.abspath(args.headroom)
        self.source_dir = os.path.abspath(args.source_dir)
        self.seed = args.seed
        self.rng = random.Random(args.seed)
        self.speed = args.speed
        self.ttl = args.ttl
        self.period_s = args.period_s
        self.budget_w = args.site_budget_w
        self.reserve_w = args.reserve_w
        self.site = "chaos"
        self.restarts = 0
        self.tmp = tempfile.mkdtemp(prefix="headroom-chaos-")
        self.procs = Procs()
        self.faults = []  # (kind, t_fault, t_end, recovery_s or None)
        self.transient = []  # agents started by a fault and stopped before its recovery
        self.wipes = 0
        self.cuts_before_quorum_loss = 0  # quorum_lost_after_post: cuts answered 202
        self.budget_w_restarts = collections.Counter()  # restart_with_budget_w: refused or ran
        self.wipe_times = []  # terms start again after each (the auditor's stale-term check)
        self.long_faults_added = getattr(args, "long_faults", 0)  # --long-faults
        self.coordinator_logs = []  # every replica's log, killed ones too
        # agent_partition, agent_frozen_past_ttl: (kind, job, cut_s, forgotten after s or None)
        self.long_faults = []

    # -- the site --
    def leader(self):
        for c in self.coordinators:
            if c.p.poll() is None:
                st = c.status()
                if st and st.get("role") == "leader":
                    return c
        return None

    def fully_allocated(self):
        """Every running agent acts on the grant the latest ledger holds for it, and the grants
        add up to the budget in force less the reserve (or to every demand)."""
        ledger = self.watch.latest()
        if not ledger or ledger["site_budget_w"] != ledger["target_site_budget_w"]:
            return False
        jobs = ledger["jobs"]
        for a in self.agents:
            if a.stopped or a.p.poll() is not None:
                return False
            j = jobs.get(a.job)
            if not j or j["lease"] == 0:
                return False
            recs = [r for r in read_log_tail(a) if "state" in r]
            if not recs:
                return False
            last = recs[-1]
            if (last["pid"] != a.p.pid or last["state"] != "granted" or last["seq"] != j["seq"]
                    or last["lease"] != j["lease"]):
                return False
        grants = sum(j["grant_w"] for j in jobs.values())
        demand = sum(j["demand_w"] for j in jobs.values())
        standby = sum(s["standby_w"] for s in ledger.get("standby", {}).values())
        floors = sum(j["floor_w"] for j in jobs.values())
        # Overcommitted (jobs started that do not fit, or the standby of killed ones not yet
        # forgotten): every grant at its floor is all the site can do.
        target = max(floors, min(ledger["site_budget_w"] - ledger["reserve_w"] - standby, demand))
        return abs(grants - target) < 0.5 and all(j["held_w"] <= j["grant_w"] + 1e-6 for j in jobs.values())

    def run(self, n_faults, progress, only=None):
        kinds = ["agent_kill", "agent_stop", "coordinator_kill", "etcd_leader_kill",
                 "budget_down", "budget_up", "extra_jobs", "duplicate_name", "member_unreadable",
                 "ledger_deleted", "etcd_wiped", "quorum_lost_after_post", "restart_with_budget_w"]
        kinds = [k for k in kinds + LONG_KINDS if k in only] if only else kinds
        # --long-faults K: K long faults more, at random places among the others (drawn from
        # their own generator, so the other faults are those of the same seed without them).
        long_rng = random.Random(self.seed * 7919 + 53)
        total = n_faults + self.long_faults_added
        long_at = set(long_rng.sample(range(total), self.long_faults_added))
        self.etcd = Etcd(self.procs, self.tmp)
        self.watch = LedgerWatch(self.etcd, f"/headroom/{self.site}/ledger")
        self.watch.start()
        self.coordinators = [Coordinator(self, 0), Coordinator(self, 1)]
        self.agents = [Agent(self, i) for i in range(len(JOBS))]
        if "agent_partition" in kinds or self.long_faults_added:
            for i in LONG_FAULT_AGENTS:
                self.agents[i].proxies = [BlackHoleProxy(port) for port in self.etcd.client]
        for a in self.agents:
            a.start()
        if not wait_until(self.fully_allocated, 60, 0.05):
            raise RuntimeError("the site was never fully allocated: see " + self.tmp)
        for n in range(total):
            kind = long_rng.choice(LONG_KINDS) if n in long_at else self.rng.choice(kinds)
            t0 = time.monotonic()
            self.extra_check = None
            t_end = self.inject(kind)
            ok = wait_until(lambda: self.fully_allocated() and
                            (self.extra_check is None or self.extra_check()), 30, 0.02)
            recovery = (time.monotonic() - t_end) if ok else None
            self.faults.append((kind, t0, t_end, recovery))
            if progress:
                print(f"chaos: fault {n + 1}/{total} {kind}: "
                      f"{'back in %.2f s' % recovery if recovery is not None else 'NOT back in 30 s'}",
                      file=sys.stderr, flush=True)
            # A random pause before the next one (faults may also land mid-recovery).
            time.sleep(self.rng.uniform(0.0, 0.5))

    def inject(self, kind):
        """Injects one fault; returns when its recovery is timed from: the restart or SIGCONT
        of an agent, the kill of a coordinator or of etcd's leader, the request of a budget."""
        rng = self.rng
        if kind == "agent_kill":
            a = rng.choice(self.agents)
            a.p.kill()
            a.p.wait()
            time.sleep(rng.uniform(0.0, 0.5))
            self.restarts += 1
            a.start()
            return time.monotonic()
        if kind == "restart_with_budget_w":
            # An agent restarted with the shipped deploy/agent.toml's local budget (F1): above
            # the job's floor it is refused at once (one line, exit status 2) and started
            # again without it; at or below the floor it runs (and is audited) as it is.
            a = rng.choice(self.agents)
            a.p.kill()
            a.p.wait()
            self.restarts += 1
            a.start(("--budget-w", "314.6"))
            try:
                rc = a.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                rc = None
            if rc is None:
                self.budget_w_restarts["ran"] += 1
            else:
                self.budget_w_restarts["refused" if rc == 2 else f"exit {rc}"] += 1
                a.start()
            return time.monotonic()
        if kind in LONG_KINDS:
            return self.cut_until_forgotten(kind)
        if kind == "agent_stop":
            a = rng.choice(self.agents)
            a.p.send_signal(signal.SIGSTOP)
            a.stopped = True
            time.sleep(rng.uniform(2.0, 3.0) * self.ttl)
            a.p.send_signal(signal.SIGCONT)
            a.stopped = False
            return time.monotonic()
        if kind in ("extra_jobs", "duplicate_name"):
            # Agents the site may not admit: three new 7B jobs, or a second agent under a taken
            # name. They run a few seconds (standby, or admitted where they fit), then are
            # SIGKILLed; the auditor counts them throughout.
            n = len(self.transient)
            if kind == "extra_jobs":
                new = [Agent(self, 100 + n + i, job=f"extra{n + i}-a100-7b-tp1",
                             scenario="a100-7b-tp1") for i in range(3)]
            else:
                a = rng.choice(self.agents)
                new = [Agent(self, a.index, job=a.job, scenario=a.scenario,
                             log=f"{self.tmp}/{a.job}.dup{n}.site.jsonl")]
            for x in new:
                x.start()
                self.transient.append(x)
            time.sleep(rng.uniform(2.0, 4.0))
            for x in new:
                x.p.kill()
                x.p.wait()
                x.killed_at = time.monotonic()
            return time.monotonic()
        if kind == "ledger_deleted":
            # `etcdctl del` of the ledger: the leader rebuilds it under a new epoch.
            try:
                post(self.etcd.url(0) + "/v3/kv/deleterange",
                     {"key": b64(f"/headroom/{self.site}/ledger")}, 2.0)
            except Exception:
                pass
            return time.monotonic()
        if kind == "etcd_wiped":
            # etcd's state lost: every member's data removed, the cluster started empty. The
            # watch starts again from the new cluster's first revision.
            self.wipes += 1
            t = time.monotonic()
            self.wipe_times.append(t)
            # The watch starts again from the new cluster's first revision when it first hears
            # from it (LedgerWatch: by the cluster id): resetting it here would replay the old
            # cluster's history, stamped as arriving now.
            self.etcd.wipe(self.wipes)
            self.extra_check = lambda: self.leader() is not None
            return t
        if kind == "member_unreadable":
            # A value written over an agent's member key on its lease, in a version newer than
            # the coordinator reads: unknown is not gone (the agent puts it again at its next
            # change, or at its refresh, 60 s).
            ledger = self.watch.latest() or {"jobs": {}}
            a = rng.choice(self.agents)
            j = ledger["jobs"].get(a.job)
            if j and j["lease"]:
                value = json.dumps({"v": 99, "job": a.job, "lease": j["lease"]})
                try:
                    post(self.etcd.url(0) + "/v3/kv/put",
                         {"key": b64(f"/headroom/{self.site}/members/{a.job}"),
                          "value": b64(value), "lease": str(j["lease"])}, 2.0)
                except Exception:
                    pass
            return time.monotonic()
        if kind == "coordinator_kill":
            lead = wait_until(self.leader, 10, 0.05)
            t = time.monotonic()
            if lead:
                lead.p.kill()
                lead.p.wait()
                t = time.monotonic()
                self.coordinators.remove(lead)
            self.coordinators.append(Coordinator(self, len(self.faults) + 2))
            self.extra_check = lambda: self.leader() is not None
            return t
        if kind == "etcd_leader_kill":
            i = wait_until(self.etcd.leader, 10, 0.05)
            t = time.monotonic()
            if i is not None:
                self.etcd.kill(i)
                t = time.monotonic()
                time.sleep(rng.uniform(0.5, 2.0))
                self.etcd.restart(i)
                wait_until(lambda: self.etcd.healthy(i), 20, 0.05)
            # Back when every agent has renewed its lease since the kill (its validity runs
            # past the kill by a TTL less the margin) and acts on its grant.
            margin = min(1.0, self.ttl / 3.0)
            self.extra_check = lambda: all(
                (read_log_tail(a) or [{}])[-1].get("valid_until_mono_s") is not None and
                read_log_tail(a)[-1]["valid_until_mono_s"] > t + self.ttl - margin
                for a in self.agents)
            return t
        if kind == "quorum_lost_after_post":
            # A cut the leader answered 202 to, then etcd's quorum lost 0.2 s later (its leader
            # and one more member killed) for 1-3 s: the target was written before the answer,
            # so the cut comes into force once a leader is back (F4).
            w = self.budget_to_ask("budget_down")
            lead = wait_until(self.leader, 10, 0.05)
            accepted = False
            try:
                post(f"http://127.0.0.1:{lead.port}/v1/site-budget", {"site_budget_w": w}, 2.0)
                accepted = True
                self.cuts_before_quorum_loss += 1
            except Exception:
                pass
            time.sleep(0.2)
            i = wait_until(self.etcd.leader, 10, 0.05)
            i = 0 if i is None else i
            lost = [i, (i + 1) % self.etcd.n]
            for k in lost:
                self.etcd.kill(k)
            time.sleep(rng.uniform(1.0, 3.0))
            for k in lost:
                self.etcd.restart(k)
            for k in lost:
                wait_until(lambda k=k: self.etcd.healthy(k), 20, 0.05)
            t = time.monotonic()
            margin = min(1.0, self.ttl / 3.0)
            self.extra_check = lambda: (
                (not accepted or abs((self.watch.latest() or {}).get("site_budget_w", 0) - w) < 1e-6)
                and self.leader() is not None and all(
                    (read_log_tail(a) or [{}])[-1].get("valid_until_mono_s") is not None and
                    read_log_tail(a)[-1]["valid_until_mono_s"] > t + self.ttl - margin
                    for a in self.agents))
            return t
        if True:
            w = self.budget_to_ask(kind)
            t = time.monotonic()
            for _ in range(50):
                lead = wait_until(self.leader, 10, 0.05)
                try:
                    t = time.monotonic()
                    post(f"http://127.0.0.1:{lead.port}/v1/site-budget", {"site_budget_w": w}, 2.0)
                    break
                except Exception:
                    time.sleep(0.1)
            # Back when the ledger has it in force and the grants add up to it.
            self.extra_check = lambda: abs((self.watch.latest() or {}).get("site_budget_w", 0) - w) < 1e-6
            return t

    def forget_s(self, job):
        """When the ledger forgets a job with no member (coord/plan.h, step 1): after the
        coordinators' --forget-after-s and two of the longest steps its member declared."""
        j = ((self.watch.latest() or {}).get("jobs") or {}).get(job) or {}
        return max(FORGET_AFTER_S, 2.0 * j.get("step_s", 0.0))

    def forgotten_since(self, job, offsets):
        """Whether a coordinator has logged forgetting `job` since `offsets` (log sizes)."""
        needle = f"{job}: no member for "
        for path in self.coordinator_logs:
            try:
                with open(path, "rb") as f:
                    f.seek(offsets.get(path, 0))
                    text = f.read().decode(errors="replace")
            except FileNotFoundError:
                continue
            if any(needle in line and ": forgotten" in line for line in text.splitlines()):
                return True
        return False

    def cut_until_forgotten(self, kind):
        """agent_partition: an agent's proxies stop forwarding (it runs on, cut off from etcd);
        agent_frozen_past_ttl: SIGSTOP. Either lasts until a coordinator logs that it forgot the
        job (its lease expired, then FORGET_AFTER_S and two of its steps passed), and 2-5 s more
        while the others hold the watts its floor released; then the heal or SIGCONT. A fault
        whose job is not forgotten within forget_s + 30 s ends then and is counted as such."""
        rng = self.rng
        a = self.agents[rng.choice(LONG_FAULT_AGENTS)]
        # Once the ledger knows the job's step (its member declares one after a step or two), so
        # that forgetting it waits on the steps too, not only on FORGET_AFTER_S.
        wait_until(lambda: (((self.watch.latest() or {}).get("jobs") or {})
                            .get(a.job, {}).get("step_s")), 30, 0.1)
        expect_s = self.forget_s(a.job)
        offsets = {p: os.path.getsize(p) for p in self.coordinator_logs if os.path.exists(p)}
        t_cut = time.monotonic()
        if kind == "agent_partition":
            for x in a.proxies:
                x.cut()
        else:
            a.p.send_signal(signal.SIGSTOP)
            a.stopped = True
        seen = wait_until(lambda: self.forgotten_since(a.job, offsets), expect_s + 30.0, 0.25)
        forgotten_s = (time.monotonic() - t_cut) if seen else None
        if seen:
            time.sleep(rng.uniform(2.0, 5.0))
        if kind == "agent_partition":
            for x in a.proxies:
                x.heal()
        else:
            a.p.send_signal(signal.SIGCONT)
            a.stopped = False
        t = time.monotonic()
        self.long_faults.append((kind, a.job, t - t_cut, forgotten_s))
        said = f"forgotten after {forgotten_s:.1f} s" if seen else "NOT forgotten"
        print(f"chaos: {kind} {a.job}: {said} (expected {expect_s:.0f} s), "
              f"healed after {t - t_cut:.1f} s",
              file=sys.stderr, flush=True)
        return t

    def budget_to_ask(self, kind):
        """A site budget to POST: below the one in force ("budget_down") or above it."""
        ledger = self.watch.latest()
        floors = sum(j["floor_w"] for j in ledger["jobs"].values()) if ledger else 0.0
        floors += sum(s["standby_w"] for s in ledger.get("standby", {}).values()) if ledger else 0.0
        # Room left for the standby a fault may start (MAX_NEWCOMER_W): jobs that do not fit
        # even at standby would be overcommitted -- the operator's error, not the site's.
        lo = floors + self.reserve_w + MAX_NEWCOMER_W + 10.0
        if kind == "budget_down":
            return self.rng.uniform(lo, max(lo, ledger["site_budget_w"] if ledger else self.budget_w))
        return self.rng.uniform(ledger["site_budget_w"] if ledger else self.budget_w,
                                1.25 * self.budget_w)

    def forge_grant(self):
        # The coordinators are stopped first: a leader repairs a grant key that differs from
        # its ledger within a period, and the agent must read the forgery before that.
        for c in self.coordinators:
            c.p.send_signal(signal.SIGSTOP)
        ledger = self.watch.latest()
        a = self.agents[0]
        j = ledger["jobs"][a.job]
        grant = {"job": a.job, "term": ledger["term"], "epoch": ledger["_epoch"],
                 "seq": ledger["seq"] + 1000,
                 "lease": j["lease"], "job_budget_w": 2.0 * self.budget_w, "admitted": True,
                 "reason": "forged"}
        post(self.etcd.url(0) + "/v3/kv/put",
             {"key": b64(f"/headroom/{self.site}/grants/{a.job}"), "value": b64(json.dumps(grant))})
        # Until the agent has acted on it.
        wait_until(lambda: any(r.get("seq") == grant["seq"] for r in read_log_tail(a)), 10, 0.02)
        time.sleep(0.2)
        for c in self.coordinators:
            c.p.send_signal(signal.SIGCONT)

    def stop(self):
        self.watch.stop = True
        self.procs.stop_all()
        for a in getattr(self, "agents", []):
            for x in a.proxies or []:
                x.close()
        self.save_audit_input()

    # What the audit reads besides the logs, kept beside them (--audit DIR runs it again).
    AUDIT_INPUT = "audit_input.json"

    def save_audit_input(self):
        state = {
            "params": {"speed": self.speed, "ttl": self.ttl, "period_s": self.period_s,
                       "budget_w": self.budget_w, "reserve_w": self.reserve_w},
            "revisions": list(self.watch.revisions),
            "faults": self.faults, "wipe_times": self.wipe_times,
            "agents": [{"log": a.log, "job": a.job} for a in self.agents],
            "transient": [{"log": a.log, "job": a.job, "killed_at": a.killed_at}
                          for a in self.transient],
            "cuts_before_quorum_loss": self.cuts_before_quorum_loss,
            "budget_w_restarts": dict(self.budget_w_restarts),
            "long_faults": self.long_faults,
        }
        with open(os.path.join(self.tmp, self.AUDIT_INPUT), "w") as f:
            json.dump(state, f)

    @classmethod
    def from_audit_input(cls, tmp):
        """A Chaos whose audit reads a kept run's logs and what it saved beside them."""
        with open(os.path.join(tmp, cls.AUDIT_INPUT)) as f:
            state = json.load(f)
        c = cls.__new__(cls)
        c.tmp = tmp
        for k, v in state["params"].items():
            setattr(c, k, v)
        c.watch = types.SimpleNamespace(revisions=[tuple(r) for r in state["revisions"]])
        c.faults = [tuple(f) for f in state["faults"]]
        c.wipe_times = state["wipe_times"]
        c.agents = [types.SimpleNamespace(killed_at=None, **a) for a in state["agents"]]
        c.transient = [types.SimpleNamespace(**a) for a in state["transient"]]
        c.cuts_before_quorum_loss = state["cuts_before_quorum_loss"]
        c.budget_w_restarts = collections.Counter(state["budget_w_restarts"])
        c.long_faults = [tuple(f) for f in state.get("long_faults", [])]
        return c

    # -- the audit --
    def audit(self):
        # Every agent process's log (a duplicate has its own), by path; each record names its job.
        units = {a.log: a.job for a in self.agents + self.transient}
        # A transient agent's twin dies with it; what it acted on is valid at most a TTL more.
        gone_after = {a.log: a.killed_at + self.ttl for a in self.transient if a.killed_at}
        logs = {path: read_log(path) for path in units}
        revisions = list(self.watch.revisions)
        # Floors and reserve, from the ledgers (the agents log what they act on, not floors):
        # admitted jobs' and those in standby (a duplicate's, JOB@LEASE, is its job's).
        floor = {}
        for _, _, l in revisions:
            for job, j in l["jobs"].items():
                floor[job] = j["floor_w"]
            for name, s in l.get("standby", {}).items():
                floor.setdefault(name.split("@")[0], s["floor_w"])
        # Each process's twin phase over time (its power records): a job at standby draws its
        # standby while its twin holds, its floor while a step runs.
        held_phases = ("idle", "startup", "stopped")
        phases = {path: ([r["t_mono_s"] for r in recs if "phase" in r],
                         [r["phase"] for r in recs if "phase" in r]) for path, recs in logs.items()}

        def running_at(path, t):
            ts, ps = phases[path]
            k = bisect.bisect_right(ts, t) - 1
            return k >= 0 and ps[k] not in held_phases

        # Each job's standby, as its own agents logged it (a process is at standby, with its
        # standby as its budget, until it is first granted); its floor where none was logged.
        standby = {}
        for path, recs in logs.items():
            for r in recs:
                if r.get("state") == "standby":
                    job = units[path]
                    standby[job] = max(standby.get(job, 0.0), r["job_budget_w"])
        for job, w in standby.items():
            standby[job] = min(w, floor.get(job, w))
        # Each job's longest step seen, in wall seconds, from its twins' phases: from entering
        # rollout to the next rollout or hold. A step with a gap of more than a TTL between two
        # records (its process stopped) is not a step's length, and is left out.
        longest_step = {}
        for path, recs in logs.items():
            seen = {}  # pid -> (t of its last phase record, that phase, t its step began or None)
            for r in recs:
                if "phase" not in r:
                    continue
                t, pid, phase = r["t_mono_s"], r["pid"], r["phase"]
                if pid not in seen:
                    seen[pid] = (t, phase, None)  # a step under way: its beginning not seen
                    continue
                t_last, phase_last, began = seen[pid]
                if began is not None and t - t_last > self.ttl:
                    began = None
                entering = phase == "rollout" and phase_last != "rollout"
                if began is not None and (entering or phase in held_phases):
                    longest_step[units[path]] = max(longest_step.get(units[path], 0.0), t - began)
                    began = None
                seen[pid] = (t, phase, t if entering else began)

        # The highest budget each job acted on over its floor (STEP_BOUND_STEPS).
        slowest = {}
        for path, recs in logs.items():
            job = units[path]
            for r in recs:
                if r.get("state") == "granted" and floor.get(job, 0.0) > 0.0:
                    slowest[job] = max(slowest.get(job, STEP_BOUND_STEPS),
                                       r["job_budget_w"] / floor[job])

        def after_validity_w(job, t, valid_until):
            """What a process draws after its last logged budget ran out with nothing logged since
            (stopped, or dead): its trainer, failing closed, ends the step under way on its floor
            and then holds (docs/SITE.md, "Every job at the site"), so its floor for its longest
            step seen times STEP_BOUND_STEPS (or its grants' ratio to its floor), then its
            standby; its floor for as long as no step of it was seen."""
            step_s = longest_step.get(job)
            if step_s is None or t <= valid_until + slowest.get(job, STEP_BOUND_STEPS) * step_s:
                return floor.get(job, 0.0)
            return standby.get(job, floor.get(job, 0.0))
        # Every grant written: the ledger holds each job's latest; ledgers are watched at every
        # revision, so every grant is seen.
        issued = {}  # (job, term, seq, lease) -> the watts of those grants
        for _, _, l in revisions:
            for job, j in l["jobs"].items():
                issued.setdefault((job, l["term"], j["seq"], j["lease"]), set()).add(j["grant_w"])
        # Budget in force: by arrival time, and by the grants acted on (a ledger whose seq an
        # agent acts on had been written when it did).
        by_time = [(t, l["site_budget_w"] - l["reserve_w"]) for t, _, l in revisions]
        # The jobs each ledger admits: a job in `local` that no ledger in force admits is
        # outside the invariant (docs/SITE.md: it runs on its local budget until admitted;
        # the reserve is for it); the true-power windows below still count its power.
        admitted_by_time = [set(l["jobs"]) for _, _, l in revisions]
        # The ledger that issued a grant: the first revision of its term that holds it for its
        # job (same seq and lease; leases are unique to one etcd history, so a grant from before
        # a wipe is not taken for one after it). Its index orders it among the revisions.
        issuing = {}  # (job, term, seq, lease) -> index in revisions
        for i, (_, _, l) in enumerate(revisions):
            for job, j in l["jobs"].items():
                issuing.setdefault((job, l["term"], j["seq"], j["lease"]), i)

        events = []  # (t, path, record)
        stale = []
        for path, recs in logs.items():
            job = units[path]
            max_term = {}
            for r in recs:
                if "state" not in r:
                    continue
                events.append((r["t_mono_s"], path, r))
                if r["state"] == "granted":
                    # The log prints watts to 6 decimals: equal within a milliwatt.
                    key = (job, r["term"], r["seq"], r["lease"])
                    if not any(abs(w - r["job_budget_w"]) <= 1e-3 for w in issued.get(key, ())):
                        stale.append(f"{job}: acted on a grant no ledger issued: {key}")
                    # Terms start again when etcd's state is lost: a lower term is not stale
                    # when etcd was wiped after the process first acted on the higher one (a
                    # grant from before a wipe stays valid, and is logged, past the wipe).
                    pid = r["pid"]
                    term_max, since = max_term.get(pid, (0, 0.0))
                    if r["term"] < term_max:
                        if bisect.bisect_right(self.wipe_times, r["t_mono_s"]) > \
                                bisect.bisect_right(self.wipe_times, since):
                            max_term[pid] = (r["term"], r["t_mono_s"])
                        else:
                            stale.append(f"{job}: pid {pid} acted on term {r['term']} after "
                                         f"term {term_max}")
                    elif r["term"] > term_max:
                        max_term[pid] = (r["term"], r["t_mono_s"])
        events.sort(key=lambda e: e[0])
        # Sweep: each job's record and its validity; checks at every record and every expiry.
        current = {}
        checkpoints = sorted([e[0] for e in events] +
                             [e[2]["valid_until_mono_s"] for e in events
                              if e[2].get("valid_until_mono_s") is not None] +
                             [t for ts, _ in phases.values() for t in ts] +
                             list(gone_after.values()))
        times = [e[0] for e in events]
        violations = []
        breaker = []  # instants over the site budget itself
        transient_s = []  # instants over budget - reserve only by a newcomer's standby
        settle_s = self.ttl + 2 * self.period_s
        # Newcomers: a process whose job no ledger in force admitted when it began (the site's
        # start, extra jobs), or a duplicate name. A restarted agent is not one: its job's floor
        # is held for it.
        arrival = {}
        rev_times = [x[0] for x in by_time]
        for path, recs in logs.items():
            recs = [r for r in recs if "state" in r]
            if not recs:
                continue
            t_first = recs[0]["t_mono_s"]
            k = bisect.bisect_right(rev_times, t_first) - 1
            admitted_then = admitted_by_time[k] if k >= 0 else set()
            if ".dup" in path or units[path] not in admitted_then:
                arrival[path] = t_first
        max_sum = float("-inf")
        # (t, what every process may draw, of which newcomers' standby) at each checkpoint: the
        # sums hold until the next one (chaos_domains.py adds the domains' up).
        self.timeline = []
        ei = 0
        latest_acted = -1  # the latest ledger (index) whose grant an agent has acted on
        for t in checkpoints:
            while ei < len(events) and events[ei][0] <= t:
                _, path, r = events[ei]
                current[path] = r
                if r["state"] == "granted":
                    i = issuing.get((units[path], r["term"], r["seq"], r["lease"]), -1)
                    latest_acted = max(latest_acted, i)
                ei += 1
            total = 0.0
            newcomers_w = 0.0
            k = bisect.bisect_right(rev_times, t) - 1
            admitted = admitted_by_time[k] if k >= 0 else set()
            for path, r in current.items():
                job = units[path]
                if path in gone_after and t > gone_after[path]:
                    continue
                if r["state"] == "local" and job not in admitted:
                    continue  # --site-fail-open only: outside the site by the operator's choice
                if r["state"] == "standby":
                    w = floor.get(job, r["job_budget_w"]) if running_at(path, t) else r["job_budget_w"]
                elif r["state"] == "fenced":
                    # Fenced means held: its floor while its twin runs a step (the one under way
                    # when it fenced itself), its standby once its twin holds at the boundary.
                    w = floor.get(job, r["job_budget_w"]) if running_at(path, t) \
                        else standby.get(job, floor.get(job, r["job_budget_w"]))
                else:
                    vu = r.get("valid_until_mono_s")
                    w = r["job_budget_w"] if vu is None or t <= vu else after_validity_w(job, t, vu)
                total += w
                # A job started by a fault draws its standby without asking: for its first
                # settle_s the reserve covers it, while the others' grants come down.
                if (r["state"] == "standby" and path in arrival
                        and arrival[path] <= t < arrival[path] + settle_s):
                    newcomers_w += w
            # The budget in force: that of the latest ledger to arrive, or of a later one whose
            # grants an agent already acts on.
            limit = self.budget_w - self.reserve_w
            if max(k, latest_acted) >= 0:
                limit = by_time[max(k, latest_acted)][1]
            self.timeline.append((t, total, newcomers_w))
            max_sum = max(max_sum, total - newcomers_w - limit)
            if total - newcomers_w > limit + 1e-3:
                violations.append((t, total, limit))
            # The site budget itself (the breaker): at every instant, newcomers included.
            if total > limit + self.reserve_w + 1e-3:
                breaker.append((t, total, limit + self.reserve_w))
            if newcomers_w > 0 and total > limit + 1e-3:
                transient_s.append(t)
        del times

        # Site power: each job's latest power record, on a grid; 30 s of twin time per window.
        power = {path: [(r["t_mono_s"], r["power_w"]) for r in recs if "power_w" in r]
                 for path, recs in logs.items()}

        def budget_at(t):
            k = bisect.bisect_right(rev_times, t) - 1
            return self.budget_w if k < 0 else by_time[k][1] + self.reserve_w
        windows, windows_over, worst = power_windows(power, gone_after, budget_at, self.speed)
        rec = [f[3] for f in self.faults if f[3] is not None]
        states = {}
        for recs in logs.values():
            for r in recs:
                if "state" in r:
                    states[r["state"]] = states.get(r["state"], 0) + 1
        return {
            "faults": len(self.faults),
            "by_kind": {k: sum(1 for f in self.faults if f[0] == k) for k in sorted({f[0] for f in self.faults})},
            "instants_checked": len(checkpoints),
            "invariant_violations": len(violations),
            "instants_over_site_budget": len(breaker),
            "newcomer_instants_over_budget_less_reserve": len(transient_s),
            "worst_excess_w": max_sum,  # the largest (sum - limit): negative when it holds
            "stale_grants_acted_on": len(stale),
            "stale_examples": stale[:5],
            "not_recovered": sum(1 for f in self.faults if f[3] is None),
            "recovery_p50_s": statistics.median(rec) if rec else None,
            "recovery_p99_s": sorted(rec)[min(len(rec) - 1, int(0.99 * len(rec)))] if rec else None,
            "recovery_max_s": max(rec) if rec else None,
            "recovery_bound_s": self.ttl + 2 * self.period_s,
            "recovered_within_bound": sum(1 for r in rec if r <= self.ttl + 2 * self.period_s),
            "windows_30s": windows,
            "windows_30s_over_site_budget": windows_over,
            "worst_window_excess_w": worst,
            "ledger_revisions": len(revisions),
            "cuts_accepted_before_quorum_loss": self.cuts_before_quorum_loss,
            "restarts_with_budget_w": dict(self.budget_w_restarts),
            "records_by_state": states,
            "violation_examples": violations[:5],
            # agent_partition, agent_frozen_past_ttl: forgotten by the ledger during the cut.
            "long_faults_forgotten": sum(1 for f in self.long_faults if f[3] is not None),
            "long_faults_not_forgotten": sum(1 for f in self.long_faults if f[3] is None),
            "long_fault_cut_s": [round(f[2], 1) for f in self.long_faults],
            "longest_step_s": {job: round(v, 2) for job, v in sorted(longest_step.items())},
        }


def power_windows(power, gone, budget_at, speed):
    """The true-power windows: `power` maps each process (a log) to its (t_mono_s, power_w)
    records; each one's latest record is its power on a grid of 0.5 s of twin time (a process in
    `gone` draws 0 after its last), summed, and averaged over windows of 30 s of twin time (30 s
    / speed of wall time) against the average of budget_at(t), the site budget in force. Returns
    (windows, windows over their budget, the largest window's excess in W)."""
    t_start = min(p[0][0] for p in power.values() if p)
    t_stop = max(p[-1][0] for p in power.values() if p)
    window_s = 30.0 / speed
    step = 0.5 / speed
    idx = {job: 0 for job in power}
    last = {job: 0.0 for job in power}
    windows_over, windows = 0, 0
    t = t_start
    acc, acc_budget, n = 0.0, 0.0, 0
    w_end = t_start + window_s
    worst = float("-inf")
    while t <= t_stop:
        for job, series in power.items():
            while idx[job] < len(series) and series[idx[job]][0] <= t:
                last[job] = series[idx[job]][1]
                idx[job] += 1
            if job in gone and idx[job] >= len(series):
                last[job] = 0.0  # its twin died with it
        acc += sum(last.values())
        acc_budget += budget_at(t)
        n += 1
        t += step
        if t >= w_end:
            windows += 1
            worst = max(worst, acc / n - acc_budget / n)
            if acc / n > acc_budget / n + 1e-6:
                windows_over += 1
            acc, acc_budget, n = 0.0, 0.0, 0
            w_end += window_s
    return windows, windows_over, worst


_tail_cache = {}


def read_log_tail(agent):
    """The agent's log, read incrementally (the site check polls it often)."""
    path = agent.log
    pos, recs = _tail_cache.get(path, (0, []))
    try:
        with open(path) as f:
            f.seek(pos)
            data = f.read()
    except FileNotFoundError:
        return recs
    cut = data.rfind("\n")
    if cut >= 0:
        for line in data[:cut].splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "state" in r:
                recs.append(r)
        pos += len(data[:cut + 1].encode())
    recs = recs[-4:]
    _tail_cache[path] = (pos, recs)
    return recs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--headroom", required=True)
    ap.add_argument("--source-dir", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    ap.add_argument("--faults", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--speed", type=float, default=20.0)
    ap.add_argument("--ttl", type=int, default=2)
    ap.add_argument("--period-s", type=float, default=0.5)
    ap.add_argument("--site-budget-w", type=float, default=4400.0)
    # The reserve covers the standby of a job started without asking while grants come down:
    # at least the largest a fault starts at once (three 7B jobs, 249 W; a 72B duplicate, 332 W).
    ap.add_argument("--reserve-w", type=float, default=400.0)
    ap.add_argument("--kinds", help="comma-separated fault kinds to draw from (default: all but "
                    "the long ones, " + ", ".join(LONG_KINDS) + ", which must be named)")
    ap.add_argument("--long-faults", type=int, default=0,
                    help="this many long faults (" + ", ".join(LONG_KINDS) + ": about 2 minutes "
                         "each) more, at random places among the --faults others")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--markdown", action="store_true", help="a table for docs/SITE.md")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--forge-grant", action="store_true",
                    help="the auditor's own test: write a grant no leader issued (twice the "
                         "site budget, for the current lease and the next seq) straight into "
                         "etcd; passes when the audit catches it")
    ap.add_argument("--audit", metavar="DIR",
                    help="audit a kept run again (its logs and audit_input.json) without running one")
    args = ap.parse_args()
    if args.audit:
        result = Chaos.from_audit_input(args.audit).audit()
        for k, v in result.items():
            print(f"{k:32} {v}")
        return 0
    if not os.access(ETCD, os.X_OK):
        print("chaos: skipped: /usr/bin/etcd is not installed (scripts/setup.sh)", file=sys.stderr)
        return 77
    chaos = Chaos(args)
    t0 = time.monotonic()
    try:
        chaos.run(args.faults, progress=True,
                  only=set(args.kinds.split(",")) if args.kinds else None)
        if args.forge_grant:
            chaos.forge_grant()
    finally:
        chaos.stop()
    result = chaos.audit()
    if args.forge_grant:
        caught = result["invariant_violations"] > 0 and result["stale_grants_acted_on"] > 0
        print(f"chaos: the forged grant was {'caught' if caught else 'NOT caught'}: "
              f"{result['invariant_violations']} instants over, {result['stale_grants_acted_on']} "
              f"grants no ledger issued", file=sys.stderr)
        shutil.rmtree(chaos.tmp, ignore_errors=True)
        return 0 if caught else 1
    result["wall_s"] = time.monotonic() - t0
    result["seed"] = args.seed
    ok = (result["invariant_violations"] == 0 and result["instants_over_site_budget"] == 0
          and result["stale_grants_acted_on"] == 0
          and result["windows_30s_over_site_budget"] == 0 and result["not_recovered"] == 0
          and result["long_faults_not_forgotten"] == 0)
    result["pass"] = ok
    if args.json:
        print(json.dumps(result, indent=2))
    elif args.markdown:
        for example in result["stale_examples"] + [str(v) for v in result["violation_examples"]]:
            print(f"chaos: {example}", file=sys.stderr)
        print(f"| faults ({', '.join(f'{k} {v}' for k, v in result['by_kind'].items())}) | {result['faults']} |")
        print("|---|---|")
        for k in ["instants_checked", "invariant_violations", "instants_over_site_budget",
                  "newcomer_instants_over_budget_less_reserve", "stale_grants_acted_on",
                  "not_recovered", "recovery_p50_s", "recovery_p99_s", "recovery_max_s",
                  "recovery_bound_s", "recovered_within_bound", "long_faults_forgotten",
                  "long_faults_not_forgotten", "long_fault_cut_s", "windows_30s",
                  "windows_30s_over_site_budget", "ledger_revisions",
                  "cuts_accepted_before_quorum_loss", "restarts_with_budget_w", "wall_s"]:
            v = result[k]
            print(f"| {k} | {v:.2f} |" if isinstance(v, float) else f"| {k} | {v} |")
    else:
        for k, v in result.items():
            print(f"{k:32} {v}")
    if args.keep or not ok:
        print(f"chaos: logs in {chaos.tmp}", file=sys.stderr)
    else:
        shutil.rmtree(chaos.tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
