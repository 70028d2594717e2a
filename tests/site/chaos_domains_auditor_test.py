#!/usr/bin/env python3
"""The domain layer's chaos auditor (chaos_domains.py) on hand-made runs (no processes): what it
must allow and what it must catch.

Each case writes the ledgers of a site and of its two domains (as their watches would have seen
them), one agent's --site-log per domain, and the audit inputs into a temporary directory, and
audits it as `chaos_domains.py --audit DIR` does. The expected counts are set by hand from the
case, not by the auditor's bookkeeping.
"""
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos  # noqa: E402
import chaos_domains  # noqa: E402

SITE_BUDGET_W, SITE_RESERVE_W = 5000.0, 200.0
DOMAIN_BUDGET_W, DOMAIN_RESERVE_W = 2400.0, 150.0


def site_ledger(held, grant=None, budget_w=SITE_BUDGET_W, standby=None):
    """The site's ledger: held maps each domain to its held watts (its grant the same unless
    `grant` says otherwise); standby maps JOB@LEASE to its watts."""
    grant = grant or held
    return {"term": 1, "seq": 1, "site_budget_w": budget_w, "target_site_budget_w": budget_w,
            "reserve_w": SITE_RESERVE_W,
            "standby": {name: {"standby_w": w, "floor_w": w, "lease": 9, "duplicate": True}
                        for name, w in (standby or {}).items()},
            "jobs": {d: {"held_w": w, "grant_w": grant[d], "floor_w": 1600.0, "demand_w": 4000.0,
                         "seq": 1, "lease": 7, "domain": True} for d, w in held.items()}}


def domain_ledger(job, budget_w, held_w, seq=1):
    return {"term": 1, "seq": seq, "site_budget_w": budget_w, "target_site_budget_w": budget_w,
            "reserve_w": DOMAIN_RESERVE_W, "standby": {},
            "jobs": {job: {"held_w": held_w, "grant_w": held_w, "floor_w": 500.0,
                           "demand_w": 3000.0, "seq": seq, "lease": 11}}}


def granted(t, job, watts, seq=1):
    return {"t_mono_s": t, "pid": 100, "job": job, "state": "granted", "job_budget_w": watts,
            "term": 1, "seq": seq, "lease": 11, "valid_until_mono_s": t + 100.0}


def power(t, job, watts):
    return {"t_mono_s": t, "pid": 100, "job": job, "power_w": watts, "phase": "rollout"}


class Run:
    """Two domains, d0 and d1, each with one agent acting on its grant from t = 0.1."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="headroom-domains-auditor-")
        self.revisions = {"site": [], "d0": [], "d1": []}
        self.logs = {"d0": [], "d1": []}
        self.rev = 1
        # The same start in every case: each domain granted 2,400 W, its job 2,250 W.
        self.site_at(0.0, site_ledger({"d0": 2400.0, "d1": 2400.0}))
        for d in ("d0", "d1"):
            self.domain_at(0.05, d, domain_ledger(f"{d}-job", DOMAIN_BUDGET_W, 2250.0))
            self.log(d, granted(0.1, f"{d}-job", 2250.0))
            self.log(d, *[power(0.1 + 0.05 * i, f"{d}-job", 2000.0) for i in range(200)])

    def site_at(self, t, value):
        self.rev += 1
        self.revisions["site"].append((t, self.rev, value))

    def domain_at(self, t, d, value):
        self.rev += 1
        self.revisions[d].append((t, self.rev, value))

    def log(self, d, *records):
        self.logs[d].extend(records)

    def audit(self):
        params = {"speed": 20.0, "ttl": 2, "period_s": 0.5}
        for level in ("site", "d0", "d1"):
            os.makedirs(os.path.join(self.tmp, level), exist_ok=True)
            agents = []
            if level != "site":
                path = os.path.join(self.tmp, level, f"{level}-job.site.jsonl")
                with open(path, "w") as f:
                    for r in sorted(self.logs[level], key=lambda r: r["t_mono_s"]):
                        f.write(json.dumps(r) + "\n")
                agents = [{"log": path, "job": f"{level}-job"}]
            budget, reserve = (SITE_BUDGET_W, SITE_RESERVE_W) if level == "site" else \
                (DOMAIN_BUDGET_W, DOMAIN_RESERVE_W)
            with open(os.path.join(self.tmp, level, chaos.Chaos.AUDIT_INPUT), "w") as f:
                json.dump({"params": dict(params, budget_w=budget, reserve_w=reserve),
                           "revisions": self.revisions[level], "faults": [], "wipe_times": [],
                           "agents": agents, "transient": [], "cuts_before_quorum_loss": 0,
                           "budget_w_restarts": {}, "long_faults": []}, f)
        with open(os.path.join(self.tmp, chaos_domains.DomainChaos.AUDIT_INPUT), "w") as f:
            json.dump({"params": dict(params, parent_ttl=4, budget_w=SITE_BUDGET_W,
                                      reserve_w=SITE_RESERVE_W, domain_budget_w=DOMAIN_BUDGET_W,
                                      domain_reserve_w=DOMAIN_RESERVE_W),
                       "faults": [], "parent": "site", "domains": ["d0", "d1"],
                       "coordinator_logs": {}}, f)
        return chaos_domains.DomainChaos.audit_dir(self.tmp)

    def close(self):
        shutil.rmtree(self.tmp, ignore_errors=True)


VIOLATIONS = ["site_ledger_over_budget_less_reserve", "domain_ledger_over_budget_less_reserve",
              "site_instants_over_budget_less_reserve", "site_instants_over_site_budget",
              "domain_instants_over_held_at_site", "agent_instants_over_domain_budget_less_reserve",
              "agent_site_instants_over_site_budget_less_reserve",
              "agent_site_instants_over_site_budget", "stale_grants_acted_on",
              "windows_30s_over_site_budget"]


class DomainAuditor(unittest.TestCase):
    def setUp(self):
        self.run = Run()

    def tearDown(self):
        self.run.close()

    def violations(self, result):
        return {k: result[k] for k in VIOLATIONS if result[k]}

    def test_a_settled_site_passes(self):
        self.assertEqual(self.violations(self.run.audit()), {})

    def test_a_cut_down_before_up_passes(self):
        # The site cuts d0 to 2,000 W: d0's job comes down, then d0's budget, then the site's
        # held (the acknowledgement), then d1 is raised into the room.
        r = self.run
        r.site_at(1.0, site_ledger({"d0": 2400.0, "d1": 2400.0},
                                   grant={"d0": 2000.0, "d1": 2400.0}))
        r.log("d0", granted(1.2, "d0-job", 1850.0, seq=2))
        r.domain_at(1.25, "d0", domain_ledger("d0-job", 2000.0, 1850.0, seq=2))
        r.site_at(1.5, site_ledger({"d0": 2000.0, "d1": 2800.0}))
        r.domain_at(1.6, "d1", domain_ledger("d1-job", 2800.0, 2650.0, seq=2))
        r.log("d1", granted(1.7, "d1-job", 2650.0, seq=2))
        self.assertEqual(self.violations(r.audit()), {})

    def test_a_domain_held_at_its_floor_while_it_draws_more_is_caught(self):
        # A new site ledger (the site's etcd wiped) holds d0 at its floor, 1,600 W, while d0's
        # budget in force is still 2,400 W; then gives d1 the room: 2,400 + 2,800 > 4,800.
        r = self.run
        r.site_at(1.0, site_ledger({"d0": 1600.0, "d1": 2400.0}))
        r.site_at(2.0, site_ledger({"d0": 1600.0, "d1": 2800.0}))
        r.domain_at(2.1, "d1", domain_ledger("d1-job", 2800.0, 2650.0, seq=2))
        r.log("d1", granted(2.2, "d1-job", 2650.0, seq=2))
        v = self.violations(r.audit())
        self.assertGreater(v.get("domain_instants_over_held_at_site", 0), 0)
        # The domains' budgets (checked as ledgers arrive): 2,400 + 2,800 > 4,800 from 2.1.
        self.assertEqual(v.get("site_instants_over_budget_less_reserve"), 1)
        self.assertEqual(v.get("site_instants_over_site_budget"), 1)  # 5,200 > 5,000
        # The agents alone: 2,250 + 2,650 = 4,900 > 4,800 from 2.2.
        self.assertGreater(v.get("agent_site_instants_over_site_budget_less_reserve", 0), 0)
        self.assertNotIn("site_ledger_over_budget_less_reserve", v)  # the ledger itself fits

    def test_a_site_ledger_over_by_a_domains_duplicate_is_caught_and_said(self):
        r = self.run
        r.site_at(1.0, site_ledger({"d0": 2400.0, "d1": 2400.0}, standby={"d0@abc": 2400.0}))
        result = r.audit()
        self.assertEqual(result["site_ledger_over_budget_less_reserve"], 1)
        self.assertEqual(result["site_ledger_over_site_budget"], 1)
        self.assertEqual(result["site_ledger_over_only_by_a_domain_duplicate"], 1)

    def test_a_domain_agent_over_its_domain_budget_is_caught(self):
        r = self.run
        r.log("d0", granted(1.0, "d0-job", 2300.0, seq=7))  # no ledger issued it; over 2,250
        v = self.violations(r.audit())
        self.assertGreater(v.get("agent_instants_over_domain_budget_less_reserve", 0), 0)
        self.assertEqual(v.get("stale_grants_acted_on"), 1)


if __name__ == "__main__":
    unittest.main()
