#!/usr/bin/env python3
"""Chaos test of a site with a domain layer (docs/SITE.md, "Domains" and "Chaos"): real
processes, faults at random, and an auditor that is not the coordinators.

The site: a parent etcd (1 member by default) and 2 `headroom coordinator` replicas of the site;
D domains (2 by default), each a 3-member etcd of its own, 2 domain coordinator replicas
(`--parent-etcd`, `--parent-site`: their leader is a member of the site, its budget its grant
from there) and 3 twin-mode agents at 20x (a 72B, a 14B and a 7B job). The processes, the etcd
watch of a ledger and the agents' audit are tests/site/chaos.py's.

Faults, drawn at random (seeded): the leading domain coordinator SIGKILLed (and a new replica
started); the leading domain coordinator SIGSTOPped past its parent lease (--parent-lease-ttl-s
and 0.5-3 s more), then SIGCONTed; every replica of a domain SIGSTOPped as long (the site holds
the domain's watts with no lease); a domain's etcd losing quorum (its leader and one more member
killed for 1-2 TTLs + 2 s, then restarted); the parent's etcd wiped (killed, its data removed,
started empty); the site's leading coordinator SIGKILLed (and a new replica); site budget cuts
and raises POSTed to the site's leader. After each fault it waits for the whole site to settle:
every domain granted by the site for a live lease and acting on its grant (its budget in force
and asked for equal to it, nothing held above a grant), the grants adding up to the site's
budget less its reserve and standby (or every demand), and each domain fully allocated as
chaos.py means it.

The auditor reads only the etcd watches of the ledgers (the site's and each domain's, each
revision timestamped as it arrives) and the agents' --site-logs, and checks:
  - at each level, every ledger revision: the sum of what it holds (its jobs' held watts and
    every standby) <= its own site budget in force - its reserve;
  - at the site, at every instant: the sum over the domains of each domain's budget in force
    (its latest ledger's site budget: what its jobs and its reserve may take) <= the site's
    budget in force - its reserve, and <= the site budget itself (the breaker);
  - each domain's budget in force <= what the site's ledger holds for it (the contract between
    the levels: a domain never takes more than the site counts for it), at every instant;
  - in each domain, chaos.py's audit of its agents against its own ledger: what each agent
    process may draw (its logged budget and validity, fenced, stopped...) summed <= the
    domain's budget in force - its reserve at every instant, and every grant acted on issued by
    a ledger of that term; and those sums added up over the domains <= the site's budget in
    force - its reserve (newcomers' standby aside for their first TTL + 2 periods, as chaos.py
    does), and <= the site budget itself;
  - true power: every agent's twin's true power, summed over the whole site, never above the
    site's budget in force in any 30 s window (of twin time).
Instants are the arrivals of ledger revisions (each watch's own clock, as chaos.py's): a watch
delayed past a period could read as an instant over. Every fault must also settle within 60 s
(not_recovered). Exit 0 when all hold, 1 otherwise, 77 when etcd is not installed. Prints a
table; --markdown and --json for the docs (make chaos). `--audit DIR` audits a kept run (--keep,
or a failed one) again.
"""
import argparse
import bisect
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos as C  # noqa: E402

PARENT_SITE = "site"
DOMAIN_JOBS = ["a100-72b-tp4", "a100-14b-tp2", "a100-7b-tp1"]
KINDS = ["domain_coordinator_kill", "domain_leader_stopped_past_lease",
         "domain_stopped_past_lease", "domain_etcd_quorum_lost", "parent_etcd_wiped",
         "parent_coordinator_kill", "budget_down", "budget_up"]
SETTLE_TIMEOUT_S = 60.0
EPS_W = 1e-3


class Level:
    """One site's processes and its ledger's watch: the parent's or a domain's. It has what
    chaos.py's Agent and Coordinator read of a Chaos, and Chaos's leader() and
    fully_allocated()."""

    leader = C.Chaos.leader
    fully_allocated = C.Chaos.fully_allocated

    def __init__(self, run, site, budget_w, reserve_w, members, extra=()):
        self.headroom, self.source_dir, self.seed = run.headroom, run.source_dir, run.seed
        self.speed, self.ttl, self.period_s = run.speed, run.ttl, run.period_s
        self.procs = run.procs
        self.site, self.budget_w, self.reserve_w = site, budget_w, reserve_w
        self.tmp = os.path.join(run.tmp, site)
        os.makedirs(self.tmp, exist_ok=True)
        self.extra = list(extra)
        self.restarts = 0
        self.replicas = 0
        self.coordinator_logs = []
        self.coordinators = []
        self.agents = []
        self.etcd = C.Etcd(self.procs, self.tmp, members)
        self.watch = C.LedgerWatch(self.etcd, f"/headroom/{site}/ledger")
        self.watch.start()
        self.wipe_times = []

    def add_coordinator(self):
        self.coordinators.append(C.Coordinator(self, self.replicas, self.extra))
        self.replicas += 1

    def members_registered(self, jobs=None):
        """Every member key of `jobs` (default: this level's agents') is in this level's etcd
        (registered, at standby until a coordinator admits it)."""
        for job in jobs if jobs is not None else [a.job for a in self.agents]:
            try:
                r = C.post(self.etcd.url(0) + "/v3/kv/range",
                           {"key": C.b64(f"/headroom/{self.site}/members/{job}")}, 2.0)
            except OSError:
                return False
            if not r.get("kvs"):
                return False
        return True

    def live_coordinators(self):
        return [c for c in self.coordinators if c.p.poll() is None]

    def agents_renewed_since(self, t):
        """Every agent acts on a budget valid past t + TTL - margin: its lease renewed after t."""
        margin = min(1.0, self.ttl / 3.0)
        for a in self.agents:
            last = (C.read_log_tail(a) or [{}])[-1]
            valid_until = last.get("valid_until_mono_s")
            if valid_until is None or valid_until <= t + self.ttl - margin:
                return False
        return True

    # What the per-domain audit (chaos.py's Chaos.audit) reads, kept in the level's directory.
    def save_audit_input(self):
        state = {
            "params": {"speed": self.speed, "ttl": self.ttl, "period_s": self.period_s,
                       "budget_w": self.budget_w, "reserve_w": self.reserve_w},
            "revisions": list(self.watch.revisions),
            "faults": [], "wipe_times": self.wipe_times,
            "agents": [{"log": a.log, "job": a.job} for a in self.agents],
            "transient": [], "cuts_before_quorum_loss": 0, "budget_w_restarts": {},
            "long_faults": [],
        }
        with open(os.path.join(self.tmp, C.Chaos.AUDIT_INPUT), "w") as f:
            json.dump(state, f)


def held_w(ledger):
    """What a ledger holds: its jobs' held watts and every standby (coord/layout.h, HeldW)."""
    return (sum(j["held_w"] for j in ledger["jobs"].values()) +
            sum(s["standby_w"] for s in (ledger.get("standby") or {}).values()))


class DomainChaos:
    def __init__(self, args):
        self.headroom = os.path.abspath(args.headroom)
        self.source_dir = os.path.abspath(args.source_dir)
        self.seed = args.seed
        self.rng = random.Random(args.seed)
        self.speed, self.ttl, self.period_s = args.speed, args.ttl, args.period_s
        self.parent_ttl = args.parent_lease_ttl_s
        self.n_domains = args.domains
        self.domain_budget_w, self.domain_reserve_w = args.domain_budget_w, args.domain_reserve_w
        self.budget_w, self.reserve_w = args.site_budget_w, args.reserve_w
        self.parent_members = args.parent_etcd_members
        self.tmp = tempfile.mkdtemp(prefix="headroom-chaos-domains-")
        self.procs = C.Procs()
        self.faults = []  # (kind, domain or None, t_fault, t_end, recovery_s or None)
        self.wipes = 0
        self.parent = None
        self.domains = []

    # -- the site --
    def start(self):
        self.parent = Level(self, PARENT_SITE, self.budget_w, self.reserve_w, self.parent_members)
        # Started bottom up, as a site is brought up (docs/SITE.md, "Domains under a site"): each
        # domain's agents register first, then its coordinators admit them and register the
        # domain at the site, then the site's coordinators start and admit every domain in their
        # first period. Whatever joins a running level draws before it is granted (a job its
        # standby, a domain its whole budget in force), which only that level's reserve covers
        # ("Every job at the site"): a domain that joined its site empty would be granted a watt
        # above its reserve, and its jobs then starting draw their standby over it.
        for d in range(self.n_domains):
            name = f"domain{d}"
            level = Level(self, name, self.domain_budget_w, self.domain_reserve_w, 3,
                          extra=["--parent-etcd", self.parent.etcd.endpoints(), "--parent-site",
                                 PARENT_SITE, "--parent-lease-ttl-s", str(self.parent_ttl)])
            for i, scenario in enumerate(DOMAIN_JOBS):
                a = C.Agent(level, 10 * d + i, scenario=scenario)
                level.agents.append(a)
            self.domains.append(level)
        for level in self.domains:
            for a in level.agents:
                a.start()
        for level in self.domains:
            C.wait_until(lambda level=level: level.members_registered(), 60, 0.1)
            for _ in range(2):
                level.add_coordinator()
        C.wait_until(lambda: self.parent.members_registered([d.site for d in self.domains]), 60,
                     0.1)
        for _ in range(2):
            self.parent.add_coordinator()
        if not C.wait_until(self.settled, 90, 0.1):
            raise RuntimeError("the site was never settled: see " + self.tmp)

    def settled(self):
        """The site's ledger in force at its target; every domain granted for a live lease, its
        grant acknowledged (held at most its grant), its budget in force and asked for equal to
        the grant, and fully allocated; the grants adding up to what the site leaves."""
        p = self.parent.watch.latest()
        if not p or abs(p["site_budget_w"] - p["target_site_budget_w"]) > 1e-6:
            return False
        for d in self.domains:
            j = p["jobs"].get(d.site)
            if not j or not j["lease"] or j["held_w"] > j["grant_w"] + 1e-6:
                return False
            dl = d.watch.latest()
            if (not dl or abs(dl["site_budget_w"] - j["grant_w"]) > EPS_W or
                    abs(dl["target_site_budget_w"] - j["grant_w"]) > EPS_W):
                return False
            if not d.fully_allocated():
                return False
            # Its leader is the member the site's ledger counts (not a second lease under its
            # name) and acts on that grant.
            lead = d.leader()
            st = (lead.status() or {}).get("parent") if lead else None
            if (not st or st.get("state") != "granted" or st.get("pending_w") or
                    int(st.get("lease") or "0", 16) != j["lease"] or
                    abs(st.get("job_budget_w", 0.0) - j["grant_w"]) > EPS_W):
                return False
        jobs = p["jobs"].values()
        grants = sum(j["grant_w"] for j in jobs)
        demand = sum(j["demand_w"] for j in jobs)
        floors = sum(j["floor_w"] for j in jobs)
        standby = sum(s["standby_w"] for s in (p.get("standby") or {}).values())
        target = max(floors, min(p["site_budget_w"] - p["reserve_w"] - standby, demand))
        return abs(grants - target) < 0.5

    def run(self, n_faults, progress, only=None):
        kinds = [k for k in KINDS if k in only] if only else KINDS
        self.start()
        for n in range(n_faults):
            kind = self.rng.choice(kinds)
            t0 = time.monotonic()
            self.extra_check = None
            domain, t_end = self.inject(kind)
            ok = C.wait_until(lambda: self.settled() and
                              (self.extra_check is None or self.extra_check()),
                              SETTLE_TIMEOUT_S, 0.05)
            recovery = (time.monotonic() - t_end) if ok else None
            self.faults.append((kind, domain, t0, t_end, recovery))
            if progress:
                back = ("back in %.2f s" % recovery if recovery is not None
                        else "NOT back in %.0f s" % SETTLE_TIMEOUT_S)
                print(f"chaos-domains: fault {n + 1}/{n_faults} {kind}"
                      f"{' ' + domain if domain else ''}: {back}", file=sys.stderr, flush=True)
            time.sleep(self.rng.uniform(0.0, 0.5))

    def kill_leader(self, level):
        """SIGKILLs the leading coordinator of `level` (a domain or the site) and starts a new
        replica; returns when the recovery is timed from (the kill)."""
        lead = C.wait_until(level.leader, 10, 0.05)
        t = time.monotonic()
        if lead:
            lead.p.kill()
            lead.p.wait()
            t = time.monotonic()
            level.coordinators.remove(lead)
        level.add_coordinator()
        self.extra_check = lambda: level.leader() is not None
        return t

    def inject(self, kind):
        """Injects one fault; returns (the domain it hit or None, when its recovery is timed
        from: a SIGCONT or restart, the kill, the request)."""
        rng = self.rng
        if kind == "domain_coordinator_kill":
            d = rng.choice(self.domains)
            return d.site, self.kill_leader(d)
        if kind in ("domain_leader_stopped_past_lease", "domain_stopped_past_lease"):
            # SIGSTOP past the parent lease (its TTL and 0.5-3 s more): the leader alone (the
            # other replica takes the domain's place at the site under a new lease), or every
            # replica (the site holds what the domain held, with no lease, until it is back).
            d = rng.choice(self.domains)
            lead = C.wait_until(d.leader, 10, 0.05)
            stopped = ([lead] if lead else []) if kind == "domain_leader_stopped_past_lease" \
                else d.live_coordinators()
            for c in stopped:
                c.p.send_signal(signal.SIGSTOP)
            time.sleep(self.parent_ttl + rng.uniform(0.5, 3.0))
            for c in stopped:
                c.p.send_signal(signal.SIGCONT)
            self.extra_check = lambda: d.leader() is not None
            return d.site, time.monotonic()
        if kind == "domain_etcd_quorum_lost":
            # Its etcd's leader and one more member killed: no quorum for 1-2 TTLs and 2 s (its
            # agents fence, its leader stops leading and leaves the site), then restarted.
            d = rng.choice(self.domains)
            i = C.wait_until(d.etcd.leader, 10, 0.05)
            i = 0 if i is None else i
            lost = [i, (i + 1) % d.etcd.n]
            for k in lost:
                d.etcd.kill(k)
            time.sleep(rng.uniform(1.0, 2.0) * self.ttl + 2.0)
            for k in lost:
                d.etcd.restart(k)
            for k in lost:
                C.wait_until(lambda k=k: d.etcd.healthy(k), 20, 0.05)
            t = time.monotonic()
            self.extra_check = lambda: d.leader() is not None and d.agents_renewed_since(t)
            return d.site, t
        if kind == "parent_etcd_wiped":
            # The site's etcd state lost: every member's data removed, started empty. The
            # domains' parent leases are gone with it.
            self.wipes += 1
            t = time.monotonic()
            self.parent.wipe_times.append(t)
            self.parent.etcd.wipe(self.wipes)
            self.extra_check = lambda: self.parent.leader() is not None
            return None, t
        if kind == "parent_coordinator_kill":
            return None, self.kill_leader(self.parent)
        # budget_down, budget_up: POSTed to the site's leader.
        w = self.budget_to_ask(kind)
        t = time.monotonic()
        for _ in range(50):
            lead = C.wait_until(self.parent.leader, 10, 0.05)
            try:
                t = time.monotonic()
                C.post(f"http://127.0.0.1:{lead.port}/v1/site-budget", {"site_budget_w": w}, 2.0)
                break
            except Exception:
                time.sleep(0.1)
        self.extra_check = lambda: abs((self.parent.watch.latest() or {})
                                       .get("site_budget_w", 0) - w) < 1e-6
        return None, t

    def budget_to_ask(self, kind):
        """A site budget below the one in force (down to the domains' floors, the standby and
        the reserve) or above it (up to 1.25x the first)."""
        ledger = self.parent.watch.latest()
        now = ledger["site_budget_w"] if ledger else self.budget_w
        floors = (sum(j["floor_w"] for j in ledger["jobs"].values()) +
                  sum(s["standby_w"] for s in (ledger.get("standby") or {}).values())
                  if ledger else 0.0)
        lo = floors + self.reserve_w + 10.0
        if kind == "budget_down":
            return self.rng.uniform(lo, max(lo, now))
        return self.rng.uniform(now, max(now, 1.25 * self.budget_w))

    def stop(self):
        for level in [self.parent] + self.domains:
            if level is not None:
                level.watch.stop = True
        self.procs.stop_all()
        self.save_audit_input()

    # -- what the audit reads besides the logs, kept beside them (--audit DIR) --
    AUDIT_INPUT = "audit_input_domains.json"

    def save_audit_input(self):
        levels = [x for x in [self.parent] + self.domains if x is not None]
        for level in levels:
            level.save_audit_input()
        state = {
            "params": {"speed": self.speed, "ttl": self.ttl, "period_s": self.period_s,
                       "parent_ttl": self.parent_ttl, "budget_w": self.budget_w,
                       "reserve_w": self.reserve_w, "domain_budget_w": self.domain_budget_w,
                       "domain_reserve_w": self.domain_reserve_w},
            "faults": self.faults,
            "parent": self.parent.site if self.parent else None,
            "domains": [d.site for d in self.domains],
            "coordinator_logs": {x.site: x.coordinator_logs for x in levels},
        }
        with open(os.path.join(self.tmp, self.AUDIT_INPUT), "w") as f:
            json.dump(state, f)

    # -- the audit --
    @staticmethod
    def audit_dir(tmp):
        with open(os.path.join(tmp, DomainChaos.AUDIT_INPUT)) as f:
            state = json.load(f)
        params = state["params"]
        parent = C.Chaos.from_audit_input(os.path.join(tmp, state["parent"]))
        domains = {name: C.Chaos.from_audit_input(os.path.join(tmp, name))
                   for name in state["domains"]}
        return audit(params, [tuple(f) for f in state["faults"]], parent, domains,
                     state.get("coordinator_logs", {}))


def duplicate_domain_w(ledger):
    """What a ledger counts in standby for a second lease under the name of a domain it has
    admitted (JOB@LEASE, JOB a domain: another replica of that domain registering while its
    predecessor's lease lives)."""
    return sum(sb["standby_w"] for name, sb in (ledger.get("standby") or {}).items()
               if "@" in name and (ledger["jobs"].get(name.split("@")[0]) or {}).get("domain"))


def ledger_violations(revisions):
    """Ledger revisions whose held watts are over their own budget in force less their reserve
    (each with its time, revision, excess and how much of it is a domain's duplicate), and over
    their budget itself; the largest (held - (budget - reserve))."""
    over, over_budget, worst = [], 0, float("-inf")
    for t, rev, l in revisions:
        excess = held_w(l) - (l["site_budget_w"] - l["reserve_w"])
        worst = max(worst, excess)
        if excess > EPS_W:
            over.append((round(t, 3), rev, round(excess, 1), round(duplicate_domain_w(l), 1)))
        if held_w(l) > l["site_budget_w"] + EPS_W:
            over_budget += 1
    return over, over_budget, worst


def site_times(level):
    return [t for t, _, _ in level.watch.revisions]


def count_in_logs(paths, needle):
    n = 0
    for path in paths:
        try:
            with open(path, errors="replace") as f:
                n += sum(1 for line in f if needle in line)
        except FileNotFoundError:
            pass
    return n


def audit(params, faults, parent, domains, coordinator_logs):
    """parent, domains: chaos.py Chaos objects read back from each level's audit input (their
    watch's revisions, their agents' logs)."""
    kinds = sorted({f[0] for f in faults})
    out = {"faults": len(faults),
           "by_kind": {k: sum(1 for f in faults if f[0] == k) for k in kinds}}
    # 1. Each level's ledger against its own budget in force and reserve, at every revision.
    p_over, p_over_budget, p_worst = ledger_violations(parent.watch.revisions)
    out["site_ledger_revisions"] = len(parent.watch.revisions)
    out["site_ledger_over_budget_less_reserve"] = len(p_over)
    out["site_ledger_over_site_budget"] = p_over_budget
    out["site_ledger_worst_excess_w"] = p_worst
    # Of those, the revisions that would not be over without a domain's duplicate.
    out["site_ledger_over_only_by_a_domain_duplicate"] = sum(1 for o in p_over
                                                             if o[2] <= o[3] + EPS_W)
    d_over, d_over_budget, d_worst, d_revs, examples = 0, 0, float("-inf"), 0, p_over[:3]
    for name, d in domains.items():
        over, ob, worst = ledger_violations(d.watch.revisions)
        d_over += len(over)
        d_over_budget += ob
        d_worst = max(d_worst, worst)
        d_revs += len(d.watch.revisions)
        examples += [(name,) + x for x in over[:3]]
    out["domain_ledger_revisions"] = d_revs
    out["domain_ledger_over_budget_less_reserve"] = d_over
    out["domain_ledger_over_site_budget"] = d_over_budget
    out["domain_ledger_worst_excess_w"] = d_worst

    # 2. The levels against each other, at every instant a ledger of either arrives: the sum of
    # the domains' budgets in force against the site's budget in force (less its reserve, and
    # itself), and each domain's budget in force against what the site holds for it.
    events = [(t, None, l) for t, _, l in parent.watch.revisions]
    for name, d in domains.items():
        events += [(t, name, l) for t, _, l in d.watch.revisions]
    events.sort(key=lambda e: e[0])
    site = None
    in_force = {name: params["domain_budget_w"] for name in domains}  # its flag, until a ledger
    over, breaker, over_held, worst, worst_held = [], 0, [], float("-inf"), float("-inf")
    joined = set()  # domains the site's ledger has counted: before, one is a newcomer
    for t, name, l in events:
        if name is None:
            site = l
            joined |= set(l["jobs"]) | {n.split("@")[0] for n in (l.get("standby") or {})}
        else:
            in_force[name] = l["site_budget_w"]
        total = sum(in_force.values())
        limit = (site["site_budget_w"] - site["reserve_w"]) if site else \
            params["budget_w"] - params["reserve_w"]
        budget = site["site_budget_w"] if site else params["budget_w"]
        worst = max(worst, total - limit)
        if total > limit + EPS_W:
            over.append((round(t, 3), round(total, 1), round(limit, 1)))
        if total > budget + EPS_W:
            breaker += 1
        if site:
            for dn, w in in_force.items():
                if dn not in joined:
                    continue  # draws its flag's budget until the site counts it (its reserve)
                j = site["jobs"].get(dn)
                held = j["held_w"] if j else 0.0
                worst_held = max(worst_held, w - held)
                if w > held + EPS_W:
                    over_held.append((round(t, 3), dn, round(w, 1), round(held, 1)))
    out["site_instants_checked"] = len(events)
    out["site_instants_over_budget_less_reserve"] = len(over)
    out["site_instants_over_site_budget"] = breaker
    out["site_worst_excess_w"] = worst
    out["domain_instants_over_held_at_site"] = len(over_held)
    out["domain_worst_over_held_at_site_w"] = worst_held
    examples += over[:3] + over_held[:5]

    # 3. In each domain, chaos.py's audit of its agents against its own ledger.
    agent = {"instants_checked": 0, "invariant_violations": 0, "instants_over_site_budget": 0,
             "newcomer_instants_over_budget_less_reserve": 0, "stale_grants_acted_on": 0,
             "windows_30s_over_site_budget": 0}
    worst_agents = float("-inf")
    for name, d in domains.items():
        r = d.audit()
        for k in agent:
            agent[k] += r[k]
        worst_agents = max(worst_agents, r["worst_excess_w"])
        examples += [(name, str(v)) for v in r["violation_examples"][:3]] + \
            [(name, s) for s in r["stale_examples"][:3]]
    out["agent_instants_checked"] = agent["instants_checked"]
    out["agent_instants_over_domain_budget_less_reserve"] = agent["invariant_violations"]
    out["agent_instants_over_domain_budget"] = agent["instants_over_site_budget"]
    out["agent_newcomer_instants_over_domain_budget_less_reserve"] = \
        agent["newcomer_instants_over_budget_less_reserve"]
    out["agent_worst_excess_w"] = worst_agents
    out["stale_grants_acted_on"] = agent["stale_grants_acted_on"]
    out["domain_windows_30s_over_domain_budget"] = agent["windows_30s_over_site_budget"]
    # The same sums, every domain's added up, against the site's budget in force less its
    # reserve (newcomers' standby left out for their first TTL + 2 periods, as in a domain) and
    # against the site budget itself (everything), at every instant of either level.
    points = [(t, None, 0.0, 0.0) for t in site_times(parent)]
    for name, d in domains.items():
        points += [(t, name, total, new) for t, total, new in d.timeline]
    points.sort(key=lambda e: e[0])
    totals = {name: (0.0, 0.0) for name in domains}
    p_times = site_times(parent)
    over_site, breaker_site, worst_site = 0, 0, float("-inf")
    for t, name, total, new in points:
        if name is not None:
            totals[name] = (total, new)
        k = bisect.bisect_right(p_times, t) - 1
        l = parent.watch.revisions[k][2] if k >= 0 else None
        budget = l["site_budget_w"] if l else params["budget_w"]
        limit = budget - (l["reserve_w"] if l else params["reserve_w"])
        all_w = sum(x[0] for x in totals.values())
        counted_w = all_w - sum(x[1] for x in totals.values())
        worst_site = max(worst_site, counted_w - limit)
        if counted_w > limit + EPS_W:
            over_site += 1
            if over_site <= 3:
                examples.append(("agents at the site", round(t, 3), round(counted_w, 1),
                                 round(limit, 1)))
        if all_w > budget + EPS_W:
            breaker_site += 1
    out["agent_site_instants_checked"] = len(points)
    out["agent_site_instants_over_site_budget_less_reserve"] = over_site
    out["agent_site_instants_over_site_budget"] = breaker_site
    out["agent_site_worst_excess_w"] = worst_site

    # 4. True power: every agent's twin, summed over the site, in 30 s windows of twin time,
    # against the site's budget in force (by arrival of its ledger; its flag before the first).
    power = {}
    for d in domains.values():
        for a in d.agents:
            recs = C.read_log(a.log)
            power[a.log] = [(r["t_mono_s"], r["power_w"]) for r in recs if "power_w" in r]
    rev_times = [t for t, _, _ in parent.watch.revisions]

    def budget_at(t):
        k = bisect.bisect_right(rev_times, t) - 1
        return params["budget_w"] if k < 0 else parent.watch.revisions[k][2]["site_budget_w"]
    windows, windows_over, worst_window = C.power_windows(power, {}, budget_at, params["speed"])
    out["windows_30s"] = windows
    out["windows_30s_over_site_budget"] = windows_over
    out["worst_window_excess_w"] = worst_window

    # 5. Recovery, and what the logs say the faults did.
    rec = [f[4] for f in faults if f[4] is not None]
    out["not_recovered"] = sum(1 for f in faults if f[4] is None)
    out["recovery_p50_s"] = sorted(rec)[len(rec) // 2] if rec else None
    out["recovery_max_s"] = max(rec) if rec else None
    parent_logs = coordinator_logs.get(parent_name(coordinator_logs, domains), [])
    domain_logs = [p for n, ps in coordinator_logs.items() if n in domains for p in ps]
    out["site_kept_held_of_domain_without_lease"] = count_in_logs(
        parent_logs, "kept until it registers again")
    out["domain_leases_taking_their_place"] = count_in_logs(parent_logs, "takes its place, holding")
    out["domains_joining_the_site"] = count_in_logs(domain_logs, "joining site")
    out["domain_fences"] = count_in_logs(domain_logs, "gone: fenced at the floor")
    out["domain_registrations_under_a_name_taken"] = count_in_logs(
        parent_logs, "under a name taken")
    out["examples"] = [str(e) for e in examples[:12]]
    return out


def parent_name(coordinator_logs, domains):
    for n in coordinator_logs:
        if n not in domains:
            return n
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--headroom", help="the binary (required unless --audit)")
    ap.add_argument("--source-dir", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    ap.add_argument("--faults", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--speed", type=float, default=20.0)
    ap.add_argument("--ttl", type=int, default=2, help="every lease's but the domains' at the site")
    ap.add_argument("--parent-lease-ttl-s", type=int, default=4)
    ap.add_argument("--period-s", type=float, default=0.5)
    ap.add_argument("--domains", type=int, default=2)
    ap.add_argument("--parent-etcd-members", type=int, default=1)
    # A domain's 3 jobs: floors about 1,650 W together; its reserve, for an agent registering
    # again (at standby) while grants come down.
    ap.add_argument("--domain-budget-w", type=float, default=2300.0)
    ap.add_argument("--domain-reserve-w", type=float, default=150.0)
    ap.add_argument("--site-budget-w", type=float, default=5000.0)
    ap.add_argument("--reserve-w", type=float, default=200.0)
    ap.add_argument("--kinds", help="comma-separated fault kinds to draw from (default: all: " +
                    ", ".join(KINDS) + ")")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--markdown", action="store_true", help="a table for docs/SITE.md")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--audit", metavar="DIR", help="audit a kept run again, without running one")
    args = ap.parse_args()
    if args.audit:
        result = DomainChaos.audit_dir(args.audit)
        for k, v in result.items():
            print(f"{k:48} {v}")
        return 0
    if not args.headroom:
        ap.error("--headroom is required")
    if not os.access(C.ETCD, os.X_OK):
        print("chaos-domains: skipped: /usr/bin/etcd is not installed (scripts/setup.sh)",
              file=sys.stderr)
        return 77
    run = DomainChaos(args)
    t0 = time.monotonic()
    try:
        run.run(args.faults, progress=True,
                only=set(args.kinds.split(",")) if args.kinds else None)
    finally:
        run.stop()
    result = DomainChaos.audit_dir(run.tmp)
    result["wall_s"] = time.monotonic() - t0
    result["seed"] = args.seed
    ok = all(result[k] == 0 for k in [
        "site_ledger_over_budget_less_reserve", "domain_ledger_over_budget_less_reserve",
        "site_instants_over_budget_less_reserve", "site_instants_over_site_budget",
        "domain_instants_over_held_at_site", "agent_instants_over_domain_budget_less_reserve",
        "agent_site_instants_over_site_budget_less_reserve", "agent_site_instants_over_site_budget",
        "agent_instants_over_domain_budget", "stale_grants_acted_on",
        "domain_windows_30s_over_domain_budget",
        "windows_30s_over_site_budget", "not_recovered"])
    result["pass"] = ok
    for example in result["examples"]:
        print(f"chaos-domains: {example}", file=sys.stderr)
    if args.json:
        print(json.dumps(result, indent=2))
    elif args.markdown:
        print(f"| faults ({', '.join(f'{k} {v}' for k, v in result['by_kind'].items())}) "
              f"| {result['faults']} |")
        print("|---|---|")
        for k, v in result.items():
            if k in ("faults", "by_kind", "examples", "pass"):
                continue
            print(f"| {k} | {v:.2f} |" if isinstance(v, float) else f"| {k} | {v} |")
    else:
        for k, v in result.items():
            print(f"{k:48} {v}")
    if args.keep or not ok:
        print(f"chaos-domains: logs in {run.tmp}", file=sys.stderr)
    else:
        shutil.rmtree(run.tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
