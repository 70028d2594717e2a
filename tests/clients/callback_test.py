#!/usr/bin/python3
"""HeadroomCallback safe on every rank (clients/python, issue 52), against an in-process fake
agent that fixes each step's answer at its first read (fake_agent.StepAgent):
  - two ranks (two threads, each with its own AgentClient and callback, a fake torch.distributed
    giving each thread its rank) read the agent themselves at their own step boundary: the same
    group size and the same hold for the step even when the decision changes between their
    reads, each takes the hold outside any collective, only rank 0 reports;
  - actuation_for_step against an older agent (400 on ?step): a plain read;
  - the collective-timeout check at start: max_hold_s 3600 against ddp_timeout 1800 refused in
    one line naming both, 7200 passes, one process is not checked, torch's default timeout for
    the backend, an agent not heard at start (or an older one) is a warning, not a refusal;
  - a transformers trainer's events (eval, checkpoint, stopped, tokens from the logs), the
    heartbeat, the TrainerCallback base when transformers is imported first (a stand-in
    module in a subprocess), and many threads on one callback.
Standard library only, 127.0.0.1 only, no sleeps: threads wait on events with deadlines.

Usage: callback_test.py. Exit 0 on success, 1 on a failure.
"""

import contextlib
import datetime
import io
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT_DIR = os.path.join(HERE, "..", "..", "clients", "python")
sys.path.insert(0, CLIENT_DIR)
sys.path.insert(0, HERE)
from fake_agent import StepAgent  # noqa: E402
from headroom_client import (AgentClient, CollectiveTimeoutError,  # noqa: E402
                             HeadroomCallback)
from package_test import FakeAgent, decision, torch_distributed  # noqa: E402

DEADLINE_S = 20.0


class ThreadRanks:
    """torch.distributed for ranks that are threads of this process: get_rank is the calling
    thread's (set with as_rank); every collective is recorded (there must be none)."""

    def __init__(self, backend="gloo", constants=None):
        self.group = types.SimpleNamespace(WORLD=object())
        self.local = threading.local()
        self.backend = backend
        self.constants = constants
        self.collectives = []

    def as_rank(self, rank):
        self.local.rank = rank

    def is_available(self):
        return True

    def is_initialized(self):
        return True

    def get_rank(self, group=None):
        return getattr(self.local, "rank", 0)

    def get_backend(self, group=None):
        return self.backend

    def broadcast_object_list(self, *args, **kwargs):
        self.collectives.append(("broadcast_object_list", args, kwargs))

    def barrier(self, *args, **kwargs):
        self.collectives.append(("barrier", args, kwargs))


def closed_port_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "http://127.0.0.1:%d" % s.getsockname()[1]


class PerRank(unittest.TestCase):
    def setUp(self):
        self.agent = StepAgent(concurrency=4, group_size=8)

    def tearDown(self):
        self.agent.stop()

    def test_two_ranks_same_group_size_and_hold(self):
        dist = ThreadRanks()
        held = {0: threading.Event(), 1: threading.Event()}   # a rank is in its hold
        release = threading.Event()
        slept = {0: [], 1: []}
        results, errors = {}, []

        def rank_main(rank, steps):
            dist.as_rank(rank)
            try:
                def sleep(hold_s):
                    slept[rank].append(hold_s)
                    held[rank].set()
                    assert release.wait(DEADLINE_S), "not released"
                cb = HeadroomCallback(AgentClient(self.agent.url, timeout_s=5.0), sleep=sleep)
                for step in steps:
                    a = cb.on_step_begin(step=step, tokens=10)
                    results[(rank, step)] = (a, cb.group_size, cb.on_phase("rollout"))
            except BaseException as e:  # noqa: BLE001 -- reported by the main thread
                errors.append(repr(e))

        self.agent.hold_next_step(2.5, 1)
        with torch_distributed(dist):
            r0 = threading.Thread(target=rank_main, args=(0, [5, 6]))
            r0.start()
            self.assertTrue(held[0].wait(DEADLINE_S))  # rank 0 read step 5 first: fixed
            self.agent.decide(concurrency=6, group_size=16)  # a new decision meanwhile
            r1 = threading.Thread(target=rank_main, args=(1, [5, 6]))
            r1.start()
            self.assertTrue(held[1].wait(DEADLINE_S))  # rank 1 holds too, by itself
            self.assertNotIn((0, 5), results)  # neither began the step while held
            release.set()
            for t in (r0, r1):
                t.join(DEADLINE_S)
        self.assertEqual(errors, [])
        self.assertEqual(slept, {0: [2.5], 1: [2.5]})  # the same hold, once each
        for rank in (0, 1):
            a, group_size, reported = results[(rank, 5)]
            self.assertEqual((a["step"], a["group_size"], group_size, a["hold_id"]),
                             (5, 8, 8, 1))
            self.assertEqual(reported, True if rank == 0 else None)
            a, group_size, _ = results[(rank, 6)]
            self.assertEqual((a["step"], group_size, a["concurrency"]), (6, 16, 6))
        self.assertEqual(dist.collectives, [])  # no collective at all
        with self.agent.cond:
            reports = [(b["step"], b["phase"], b.get("group_size")) for b, _ in self.agent.reports]
        self.assertEqual(reports, [(5, "idle", None), (5, "rollout", 8), (6, "rollout", 16)])

    def test_refresh_is_per_rank(self):
        dist = ThreadRanks()
        with torch_distributed(dist):
            dist.as_rank(1)
            cb = HeadroomCallback(AgentClient(self.agent.url))
            cb.on_step_begin(step=0)
            self.agent.decide(concurrency=9, group_size=32)
            self.assertEqual(cb.refresh()["concurrency"], 9)
            self.assertEqual((cb.concurrency(), cb.group_size), (9, 8))
        self.assertEqual(dist.collectives, [])

    def test_older_agent_without_step(self):
        agent = StepAgent(concurrency=3, group_size=4, legacy=True)
        try:
            client = AgentClient(agent.url)
            a = client.actuation_for_step(3)
            self.assertEqual((a["concurrency"], a["group_size"]), (3, 4))
            self.assertNotIn("step", a)
            self.assertTrue(client.reachable)
            with agent.cond:
                self.assertEqual(agent.paths, ["/v1/actuation?step=3", "/v1/actuation"])
        finally:
            agent.stop()

    def test_an_answer_for_another_step_is_no_decision(self):
        fake = FakeAgent(decision(4, concurrency=5, step=9))
        try:
            client = AgentClient(fake.url, safe_concurrency=2, safe_group_size=2)
            a = client.actuation_for_step(3)
            self.assertTrue(a["reason"].startswith("fallback"), a)
            self.assertEqual(a["concurrency"], 2)
        finally:
            fake.stop()


class CollectiveTimeout(unittest.TestCase):
    def setUp(self):
        self.agent = StepAgent()
        self.cb = HeadroomCallback(AgentClient(self.agent.url))

    def tearDown(self):
        self.agent.stop()

    def max_hold(self, s):
        with self.agent.cond:
            self.agent.status = {"max_hold_s": s} if s is not None else {"version": "old"}

    def phases(self):
        with self.agent.cond:
            return [b["phase"] for b, _ in self.agent.reports]

    def test_refused_in_one_line_naming_both(self):
        self.max_hold(3600)
        args = types.SimpleNamespace(ddp_timeout=1800, world_size=2)
        with self.assertRaises(CollectiveTimeoutError) as e:
            self.cb.on_train_begin(args, None, None)
        line = str(e.exception)
        self.assertIsInstance(e.exception, ValueError)
        self.assertNotIn("\n", line)
        self.assertEqual(line, "headroom: the agent may hold a step for up to 3600 s "
                               "(max_hold_s) but the collective timeout is 1800 s (ddp_timeout): "
                               "raise ddp_timeout above 3600 s or start the agent with "
                               "--max-hold-s below 1800")
        self.assertEqual(self.phases(), [])  # refused before it reports a start
        self.max_hold(1800)  # as long as the timeout: refused too
        self.assertRaises(CollectiveTimeoutError, self.cb.check_collective_timeout, args=args)

    def test_a_longer_timeout_passes(self):
        self.max_hold(3600)
        args = types.SimpleNamespace(ddp_timeout=7200, world_size=2)
        self.assertIsNone(self.cb.on_train_begin(args, None, None))
        self.assertEqual(self.cb.check_collective_timeout(args=args), 3600.0)
        self.assertEqual(self.phases(), ["startup"])

    def test_one_process_is_not_checked(self):
        self.max_hold(3600)
        args = types.SimpleNamespace(ddp_timeout=1800, world_size=1)
        self.assertIsNone(self.cb.check_collective_timeout(args=args))
        self.cb.on_train_begin(types.SimpleNamespace(ddp_timeout=1800), None, None)
        with self.agent.cond:
            self.assertNotIn("/v1/status", self.agent.paths)

    def test_explicit_timeout(self):
        self.max_hold(600)
        self.assertEqual(self.cb.check_collective_timeout(1000), 600.0)
        self.assertEqual(self.cb.check_collective_timeout(datetime.timedelta(minutes=20)), 600.0)
        self.assertRaises(CollectiveTimeoutError, self.cb.check_collective_timeout, 600)
        cb = HeadroomCallback(AgentClient(self.agent.url), collective_timeout_s=300)
        with self.assertRaisesRegex(CollectiveTimeoutError, r"300 s \(timeout_s\)"):
            cb.on_train_begin()

    def test_torch_default_for_the_backend(self):
        self.max_hold(900)
        constants = types.SimpleNamespace(default_pg_timeout=datetime.timedelta(minutes=30),
                                          default_pg_nccl_timeout=datetime.timedelta(minutes=10))
        with torch_distributed(ThreadRanks("gloo", constants)):
            self.assertEqual(self.cb.check_collective_timeout(), 900.0)  # 1800 s
        with torch_distributed(ThreadRanks("nccl", constants)):
            with self.assertRaisesRegex(CollectiveTimeoutError,
                                        r"600 s \(torch.distributed's default for nccl\)"):
                self.cb.check_collective_timeout()
        # A process group and ddp_timeout: ddp_timeout is the one the trainer set.
        with torch_distributed(ThreadRanks("nccl", constants)):
            self.assertEqual(self.cb.check_collective_timeout(
                args=types.SimpleNamespace(ddp_timeout=1800)), 900.0)

    def test_unheard_or_older_agent_is_a_warning(self):
        args = types.SimpleNamespace(ddp_timeout=1800, world_size=8)
        cb = HeadroomCallback(AgentClient(closed_port_url()))
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertIsNone(cb.on_train_begin(args, None, None))
        self.assertEqual(len(err.getvalue().splitlines()), 1)
        self.assertIn("did not answer", err.getvalue())
        self.max_hold(None)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertIsNone(self.cb.on_train_begin(args, None, None))
        self.assertIn("no max_hold_s", err.getvalue())


class TrainerEvents(unittest.TestCase):
    def setUp(self):
        self.agent = StepAgent(concurrency=4, group_size=8)
        self.client = AgentClient(self.agent.url, timeout_s=5.0)

    def tearDown(self):
        self.agent.stop()

    def reports(self):
        with self.agent.cond:
            return [b for b, _ in self.agent.reports]

    def test_eval_checkpoint_stopped_and_tokens(self):
        cb = HeadroomCallback(self.client)
        state = types.SimpleNamespace(global_step=3)
        control = types.SimpleNamespace(should_evaluate=False, should_save=False)
        cb.on_train_begin(None, state, control)
        self.assertIs(cb.on_step_begin(None, state, control), control)
        cb.on_log(None, state, control, logs={"num_tokens": 12345.0, "loss": 0.5})
        control.should_evaluate = True
        self.assertIs(cb.on_step_end(None, state, control), control)
        for _ in range(3):
            cb.on_prediction_step(None, state, control)  # already "eval": nothing more
        control.should_save = True
        cb.on_evaluate(None, state, control, metrics={})
        cb.on_save(None, state, control)  # already "checkpoint": nothing more
        cb.on_log(None, state, control, logs={"num_input_tokens_seen": 99})
        cb.on_log(None, state, control, logs={"loss": 1.0})
        cb.on_train_end(None, state, control)
        self.assertEqual([(b["phase"], b["tokens"], b["step"]) for b in self.reports()],
                         [("startup", 0.0, 0), ("eval", 12345.0, 3), ("checkpoint", 12345.0, 3),
                          ("stopped", 99.0, 3)])
        self.assertIsNone(cb.on_substep_end(None, state, control))  # unhandled: a no-op

    def test_prediction_step_reports_eval_once(self):
        cb = HeadroomCallback(self.client)
        for _ in range(5):
            cb.on_prediction_step()
        cb.on_save()
        self.assertEqual([b["phase"] for b in self.reports()], ["eval", "checkpoint"])

    def test_phase_fields(self):
        cb = HeadroomCallback(self.client)
        cb.on_step_begin(step=2)
        self.assertTrue(cb.on_phase("rollout", tokens=5, in_flight=7, progress=0.5, engines=2,
                                    admission="continuous"))
        self.assertTrue(cb.on_phase("train"))  # engines and admission kept
        self.assertEqual(self.reports(), [
            {"step": 2, "phase": "rollout", "tokens": 5.0, "in_flight": 7, "progress": 0.5,
             "group_size": 8, "engines": 2, "admission": "continuous"},
            {"step": 2, "phase": "train", "tokens": 5.0, "in_flight": 0, "group_size": 8,
             "engines": 2, "admission": "continuous"}])
        self.assertRaises(ValueError, cb.on_phase, "rollout", admission="batched")
        self.assertRaises(ValueError, cb.on_phase, "generate")

    def test_heartbeat(self):
        cb = HeadroomCallback(self.client, heartbeat=True, heartbeat_period_s=0.1)
        cb.on_step_begin(step=1)
        self.assertTrue(cb.on_phase("rollout", in_flight=3, engines=2, admission="chunked"))
        reports = self.agent.wait_reports(3, DEADLINE_S)  # at once, then every period
        self.assertTrue(all(b["phase"] == "rollout" and b["in_flight"] == 3 and
                            b["admission"] == "chunked" for b, _ in reports[:3]))
        cb.on_train_end()  # "stopped" sent before the heartbeat stops
        self.assertEqual(self.reports()[-1]["phase"], "stopped")
        self.assertFalse(cb._heartbeat._thread.is_alive())

    def test_many_threads_on_one_callback(self):
        cb = HeadroomCallback(self.client, sleep=lambda s: None)
        errors = []
        start = threading.Barrier(8)

        def worker(i):
            try:
                start.wait(DEADLINE_S)
                for k in range(25):
                    [lambda: cb.on_step_begin(step=k), lambda: cb.on_phase("rollout", tokens=k),
                     cb.concurrency, cb.refresh][(i + k) % 4]()
            except BaseException as e:  # noqa: BLE001
                errors.append(repr(e))

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(DEADLINE_S)
        self.assertEqual(errors, [])
        self.assertEqual(cb.group_size, 8)


TRANSFORMERS_STANDIN = '''
class TrainerCallback:
    """A stand-in with transformers' event names."""
    def on_init_end(self, args, state, control, **kwargs):
        pass
    def on_step_begin(self, args, state, control, **kwargs):
        pass
'''


class TrainerCallbackBase(unittest.TestCase):
    def run_python(self, code, with_standin):
        with tempfile.TemporaryDirectory() as tmp:
            if with_standin:
                os.mkdir(os.path.join(tmp, "transformers"))
                with open(os.path.join(tmp, "transformers", "__init__.py"), "w") as f:
                    f.write(TRANSFORMERS_STANDIN)
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([tmp, CLIENT_DIR]))
            r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_subclass_when_imported_first(self):
        self.run_python("""
            import transformers
            from headroom_client import AgentClient, HeadroomCallback
            assert issubclass(HeadroomCallback, transformers.TrainerCallback)
            cb = HeadroomCallback(AgentClient("http://127.0.0.1:9"))
            assert cb.on_init_end(None, None, None) is None
            """, True)

    def test_plain_object_otherwise_and_never_imports_it(self):
        self.run_python("""
            import sys
            from headroom_client import HeadroomCallback
            assert "transformers" not in sys.modules, "imported transformers"
            assert HeadroomCallback.__bases__ == (object,)
            """, True)


if __name__ == "__main__":
    unittest.main()
