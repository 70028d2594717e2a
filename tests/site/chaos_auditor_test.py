#!/usr/bin/env python3
"""The chaos auditor on hand-made runs (no processes): what it must allow and what it must catch.

Each case writes agents' --site-logs and an audit_input.json (ledger revisions as the watch saw
them, wipe times) into a temporary directory and audits it with `chaos.py`'s own auditor
(Chaos.from_audit_input), as `chaos.py --audit DIR` does. The expected counts are set by hand
from the case, not by the auditor's bookkeeping.
"""
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos  # noqa: E402

TTL = 2
PERIOD_S = 0.5


def ledger(term, seq, budget_w, jobs, reserve_w=0.0):
    """A ledger value: jobs maps name -> (grant_w, seq, lease)."""
    return {"term": term, "seq": seq, "site_budget_w": budget_w,
            "target_site_budget_w": budget_w, "reserve_w": reserve_w, "standby": {},
            "jobs": {name: {"grant_w": g, "held_w": g, "floor_w": 100.0, "demand_w": 1000.0,
                            "seq": s, "lease": lease}
                     for name, (g, s, lease) in jobs.items()}}


def granted(t, pid, job, watts, term, seq, lease, valid_s=1.0):
    return {"t_mono_s": t, "pid": pid, "job": job, "state": "granted", "job_budget_w": watts,
            "budget_per_gpu_w": watts, "term": term, "seq": seq, "lease": lease,
            "valid_until_mono_s": t + valid_s}


def power(t, pid, job, watts, phase="rollout"):
    return {"t_mono_s": t, "pid": pid, "job": job, "power_w": watts, "phase": phase}


class Run:
    """A kept run in a temporary directory, audited by chaos.py's auditor."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="headroom-auditor-")
        self.logs = {}
        self.revisions = []  # (t_arrival, mod_revision, ledger)
        self.wipe_times = []

    def log(self, job, *records):
        self.logs.setdefault(job, []).extend(records)

    def ledger_at(self, t, rev, value):
        self.revisions.append((t, rev, value))

    def audit(self):
        agents = []
        for job, recs in self.logs.items():
            path = os.path.join(self.tmp, job + ".site.jsonl")
            with open(path, "w") as f:
                for r in sorted(recs, key=lambda r: r["t_mono_s"]):
                    f.write(json.dumps(r) + "\n")
            agents.append({"log": path, "job": job})
        state = {"params": {"speed": 20.0, "ttl": TTL, "period_s": PERIOD_S, "budget_w": 1000.0,
                            "reserve_w": 0.0},
                 "revisions": self.revisions, "faults": [], "wipe_times": self.wipe_times,
                 "agents": agents, "transient": [], "cuts_before_quorum_loss": 0,
                 "budget_w_restarts": {}}
        with open(os.path.join(self.tmp, chaos.Chaos.AUDIT_INPUT), "w") as f:
            json.dump(state, f)
        return chaos.Chaos.from_audit_input(self.tmp).audit()

    def close(self):
        shutil.rmtree(self.tmp, ignore_errors=True)


class AuditorTest(unittest.TestCase):
    def setUp(self):
        self.run = Run()

    def tearDown(self):
        self.run.close()

    def two_jobs_at(self, t, term, budget_w, a, b, rev, seq_a, seq_b):
        self.run.ledger_at(t, rev, ledger(term, max(seq_a, seq_b), budget_w,
                                          {"a": (a, seq_a, 11), "b": (b, seq_b, 12)}))

    def grants_of_600_acted_on_before_their_ledger_arrives(self, budget_w):
        """1,000 W split 500/500 (t=1.0), then a ledger of `budget_w` granting 600/600 that the
        agents act on at t=2.0 and the watch delivers at t=2.5."""
        r = self.run
        self.two_jobs_at(1.0, 5, 1000.0, 500.0, 500.0, rev=10, seq_a=1, seq_b=2)
        self.two_jobs_at(2.5, 5, budget_w, 600.0, 600.0, rev=11, seq_a=3, seq_b=4)
        for job, pid, lease, s1, s2 in (("a", 1, 11, 1, 3), ("b", 2, 12, 2, 4)):
            r.log(job, power(1.0, pid, job, 400.0),
                  granted(1.1, pid, job, 500.0, 5, s1, lease, valid_s=5.0),
                  granted(2.0, pid, job, 600.0, 5, s2, lease, valid_s=5.0))
        return r.audit()

    def test_a_raise_acted_on_before_the_watch_delivers_its_ledger_is_in_force(self):
        # A raise to 1,200 W: the budget in force at t=2.0 is the raise's.
        result = self.grants_of_600_acted_on_before_their_ledger_arrives(1200.0)
        self.assertEqual(result["invariant_violations"], 0)
        self.assertEqual(result["stale_grants_acted_on"], 0)

    def test_after_a_wipe_a_raise_acted_on_before_its_ledger_arrives_is_in_force(self):
        # Before the wipe seqs reached 50; after it they start again. The raise's ledger (seq 4,
        # 1,200 W) arrives at t=6.5, after the agents act on it at t=6.0: its budget is in force
        # then, though an earlier history used higher seqs.
        r = self.run
        r.ledger_at(1.0, 90, ledger(40, 50, 1000.0, {"a": (500.0, 49, 11), "b": (500.0, 50, 12)}))
        r.wipe_times.append(3.0)
        r.ledger_at(4.5, 9, ledger(2, 2, 1000.0, {"a": (500.0, 1, 21), "b": (500.0, 2, 22)}))
        r.ledger_at(6.5, 12, ledger(2, 4, 1200.0, {"a": (600.0, 3, 21), "b": (600.0, 4, 22)}))
        for job, pid, old, new, s1, s2 in (("a", 1, (49, 11), 21, 1, 3), ("b", 2, (50, 12), 22, 2, 4)):
            r.log(job, power(0.5, pid, job, 400.0),
                  granted(1.1, pid, job, 500.0, 40, old[0], old[1], valid_s=1.5),
                  granted(5.0, pid, job, 500.0, 2, s1, new, valid_s=5.0),
                  granted(6.0, pid, job, 600.0, 2, s2, new, valid_s=5.0))
        result = r.audit()
        self.assertEqual(result["invariant_violations"], 0)
        self.assertEqual(result["stale_grants_acted_on"], 0)

    def test_grants_over_the_budget_of_the_ledger_that_issued_them_are_caught(self):
        # The same, but the second ledger grants 600/600 on 1,000 W: 1,200 W over 1,000 W.
        result = self.grants_of_600_acted_on_before_their_ledger_arrives(1000.0)
        self.assertGreater(result["invariant_violations"], 0)
        self.assertAlmostEqual(result["worst_excess_w"], 200.0, places=3)

    def test_a_grant_from_an_earlier_etcd_history_is_not_its_issuer(self):
        # Before a wipe, term 5 issued seq 3 to lease 11 on a 1,200 W budget. After the wipe the
        # new history's term 5 (terms start again) issues seq 3 to lease 21 on 1,000 W. An agent
        # acting on 600 W under lease 21 is over the new ledger's budget: the old ledger with the
        # same term and seq is not its issuer (leases differ).
        r = self.run
        r.ledger_at(1.0, 10, ledger(5, 3, 1200.0, {"a": (600.0, 3, 11), "b": (600.0, 2, 12)}))
        r.wipe_times.append(3.0)
        r.ledger_at(4.0, 8, ledger(5, 3, 1000.0, {"a": (600.0, 3, 21), "b": (400.0, 2, 22)}))
        r.log("a", power(0.5, 1, "a", 400.0), granted(4.5, 1, "a", 600.0, 5, 3, 21, valid_s=5.0))
        r.log("b", power(0.5, 2, "b", 400.0), granted(4.5, 2, "b", 600.0, 5, 2, 22, valid_s=5.0))
        result = r.audit()
        # b acts on 600 W where its ledger holds 400 W: a grant no ledger issued, and 1,200 W
        # over the 1,000 W in force.
        self.assertEqual(result["stale_grants_acted_on"], 1)
        self.assertGreater(result["invariant_violations"], 0)

    def test_a_lower_term_after_a_wipe_is_not_stale_even_when_the_old_grant_is_logged_past_it(self):
        # The agent acts on term 9 before the wipe at t=2 and logs it again at t=2.4 (its grant
        # valid until its deadline), then acts on the new history's term 2 at t=3.5.
        r = self.run
        r.ledger_at(1.0, 50, ledger(9, 7, 1000.0, {"a": (500.0, 7, 11)}))
        r.wipe_times.append(2.0)
        r.ledger_at(3.0, 6, ledger(2, 1, 1000.0, {"a": (400.0, 1, 31)}))
        r.log("a", power(0.5, 1, "a", 400.0),
              granted(1.2, 1, "a", 500.0, 9, 7, 11),
              granted(2.4, 1, "a", 500.0, 9, 7, 11, valid_s=0.3),
              granted(3.5, 1, "a", 400.0, 2, 1, 31))
        self.assertEqual(r.audit()["stale_grants_acted_on"], 0)

    def test_a_lower_term_without_a_wipe_is_stale(self):
        r = self.run
        r.ledger_at(1.0, 50, ledger(9, 7, 1000.0, {"a": (500.0, 7, 11)}))
        r.ledger_at(0.5, 20, ledger(2, 1, 1000.0, {"a": (400.0, 1, 11)}))
        r.log("a", power(0.2, 1, "a", 400.0),
              granted(1.2, 1, "a", 500.0, 9, 7, 11),
              granted(3.5, 1, "a", 400.0, 2, 1, 11))
        self.assertEqual(r.audit()["stale_grants_acted_on"], 1)


if __name__ == "__main__":
    unittest.main()
