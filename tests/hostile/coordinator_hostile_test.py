#!/usr/bin/env python3
"""The coordinator against hostile clients (issue 32), on the real binary and a real etcd: the
transport's suite (transport_suite.py, the agent's too: a new client's GET /v1/status p99 <= 100
ms under 64 trickling + 300 idle connections, caps, strict framing, Host, tokens, --listen,
SIGTERM) and the coordinator's own: a budget request answered 202 with exactly its keys while
hostile clients hold connections, a follower's 409 naming the leader.

    coordinator_hostile_test.py HEADROOM

Starts one etcd (free loopback ports, a temporary directory, stopped by PID) for the whole run;
every test starts its own replica, on a site of its own, on a free port. Exit 77 (skipped)
without /usr/bin/etcd. Standard library only; waits are on conditions with deadlines.
"""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hostile_http import ETCD, Attack, Daemon, Etcd, raw, wait_for  # noqa: E402
from transport_suite import AUTH, TOKEN_ENV, TransportSuite, get, post  # noqa: E402

HEADROOM = sys.argv[1]
del sys.argv[1:2]

ETCD_SERVER = None
SITES = iter(range(1, 1_000_000))


def coordinator_argv(site, *args):
    argv = [HEADROOM, "coordinator", "--etcd", ETCD_SERVER.url, "--site", site,
            "--site-budget-w", "1000", "--period-s", "0.2", "--lease-ttl-s", "2", *args]
    return argv if "--listen" in args else argv + ["--listen", "127.0.0.1:0"]


class Coordinator(Daemon):
    """`headroom coordinator` on a site of its own; ready once it leads."""

    def __init__(self, *args, env=None, site=None, lead=True):
        self.site = site or "hostile-%d-%d" % (os.getpid(), next(SITES))
        super().__init__(coordinator_argv(self.site, *args), r"listening on http://[^ ]+:(\d+)/",
                         env=env)
        if lead:
            wait_for("the replica to lead", lambda: self.status()["role"] == "leader", 30)

    def status(self):
        return json.loads(get(self.port, b"/v1/status")[2])


class CoordinatorTransport(TransportSuite, unittest.TestCase):
    """The transport's suite on the coordinator."""
    NAME = "coordinator"
    READ = b"/v1/status"
    WRITE, WRITE_BODY, WRITE_OK = b"/v1/site-budget", b'{"site_budget_w": 1200}', 202
    MAX_BODY = 4096

    def argv(self, *args):
        return coordinator_argv("hostile-options-%d" % os.getpid(), *args)

    def daemon(self, *args, env=None):
        return Coordinator(*args, env=env)


class SiteBudget(unittest.TestCase):
    def test_a_budget_request_under_attack_is_answered_202_with_exactly_its_keys(self):
        with Coordinator(env=TOKEN_ENV) as c:
            attack = Attack(c.port, trickle=64, idle=300)
            attack.start()
            try:
                wait_for("64 trickling and 300 idle connections",
                         lambda: attack.counts() == {"trickle": 64, "idle": 300}, 60)
                status, _, body = post(c.port, b"/v1/site-budget",
                                       b'{"site_budget_w": 900, "reserve_w": 50}', headers=AUTH)
                self.assertEqual(status, 202, body)
                answer = json.loads(body)
                self.assertEqual(sorted(answer), ["reserve_w", "revision", "target_site_budget_w"])
                self.assertEqual(answer["target_site_budget_w"], 900.0)
                self.assertEqual(answer["reserve_w"], 50.0)
                self.assertGreater(answer["revision"], 0)
                wait_for("the target in the ledger",
                         lambda: c.status()["target_site_budget_w"] == 900.0, 20)
            finally:
                attack.stopping.set()
                attack.join()

    def test_a_follower_refuses_writes_and_names_the_leader(self):
        with Coordinator(env=TOKEN_ENV) as leader, \
                Coordinator(env=TOKEN_ENV, site=leader.site, lead=False) as follower:
            wait_for("the follower to know the leader",
                     lambda: follower.status()["leader_listen"] is not None, 30)
            status, headers, body = post(follower.port, b"/v1/site-budget",
                                         b'{"site_budget_w": 1200}', headers=AUTH)
            self.assertEqual(status, 409, body)
            answer = json.loads(body)
            self.assertEqual(answer["leader_listen"], "127.0.0.1:%d" % leader.port)
            self.assertEqual(headers["content-type"], "application/json")
            self.assertEqual(raw(follower.port, b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                 b"Connection: close\r\n\r\n")[0], 200)


def main():
    global ETCD_SERVER
    if not os.access(ETCD, os.X_OK):
        print("coordinator_hostile: skipped: /usr/bin/etcd is not installed (scripts/setup.sh)")
        return 77
    ETCD_SERVER = Etcd()
    try:
        result = unittest.main(verbosity=2, exit=False).result
        return 0 if result.wasSuccessful() else 1
    finally:
        ETCD_SERVER.stop()


if __name__ == "__main__":
    sys.exit(main())
