#!/usr/bin/python3
"""Continuous admission in the headroom client (clients/python, issue 52): ThreadConcurrencyGate
and the asyncio ConcurrencyGate under a workload with long-tailed durations, and CapFollower
resizing gates of both kinds from an in-process fake agent.

The workload is a discrete-event simulation driven by this test: the k-th sequence admitted
gets the k-th duration of a seeded long-tailed draw, and runs until the driver ends it (the one
that would finish first in simulated time). So every run is the same, and nothing sleeps: the
driver waits on a condition for what must follow each event. Checked at every admission: the
number in flight never exceeds the limit; after every event, the number in flight is exactly
what continuous admission gives -- a new sequence as soon as one ends while fewer than the cap
run (the cap kept while work remains), none after a resize down until below it, more at once
after a resize up. And `batched` against the same durations: its occupancy decays inside each
chunk.

Usage: gates_test.py. Exit 0 on success, 1 on a failure.
"""

import asyncio
import os
import queue
import random
import socket
import sys
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
sys.path.insert(0, HERE)
from fake_agent import StepAgent  # noqa: E402
from headroom_client import (AgentClient, CapFollower, ConcurrencyGate,  # noqa: E402
                             ThreadConcurrencyGate, batched)

DEADLINE_S = 20.0
SEQUENCES = 240
FIRST_LIMIT = 8
RESIZES = {40: 3, 90: 12, 150: 5, 200: 1}  # after this many ended: the new limit


def durations(seed=52, n=SEQUENCES):
    """Long-tailed sequence lengths (seconds of simulated time): lognormal, sigma 1.2."""
    rng = random.Random(seed)
    return [rng.lognormvariate(0.0, 1.2) for _ in range(n)]


def expected_running(running_before, limit, unfinished):
    """In flight once an end has been admitted for: no admission while at or above the limit;
    else up to the limit, as far as there is work."""
    left = running_before - 1
    return left if left >= limit else min(limit, unfinished)


class Simulation:
    """The driver's bookkeeping, shared by the threaded and asyncio runs: the sequences in
    flight with their simulated end times, and what was wrong at any admission."""

    def __init__(self, gate):
        self.gate = gate
        self.lengths = durations()
        self.now = 0.0
        self.admitted = 0
        self.running = {}  # admission index -> simulated end
        self.ended = 0
        self.violations = []

    def admit(self):
        """A sequence starts (called inside the gate). Returns its admission index."""
        k = self.admitted
        self.admitted += 1
        self.running[k] = self.now + self.lengths[k]
        limit, in_flight = self.gate.limit, self.gate.in_flight
        if len(self.running) > limit or in_flight > limit:
            self.violations.append((k, len(self.running), in_flight, limit))
        return k

    def next_to_end(self):
        k = min(self.running, key=self.running.get)
        self.now = self.running[k]
        return k


class ThreadGate(unittest.TestCase):
    def test_continuous_admission_under_resizes(self):
        gate = ThreadConcurrencyGate(FIRST_LIMIT)
        sim = Simulation(gate)
        cond = threading.Condition()
        ends = {k: threading.Event() for k in range(SEQUENCES)}

        def sequence():
            with gate:
                with cond:
                    k = sim.admit()
                    cond.notify_all()
                ok = ends[k].wait(DEADLINE_S)
                with cond:
                    del sim.running[k]
                    sim.ended += 1
                    cond.notify_all()
            assert ok, "sequence %d never ended" % k

        def settle(n):
            with cond:
                self.assertTrue(cond.wait_for(lambda: len(sim.running) == n, DEADLINE_S),
                                "in flight: %d, expected %d (ended %d)" %
                                (len(sim.running), n, sim.ended))

        threads = [threading.Thread(target=sequence) for _ in range(SEQUENCES)]
        for t in threads:
            t.start()
        settle(min(FIRST_LIMIT, SEQUENCES))
        limit = FIRST_LIMIT
        while True:
            with cond:
                if not sim.running:
                    break
                r, k = len(sim.running), sim.next_to_end()
                unfinished = SEQUENCES - sim.ended - 1
            ends[k].set()
            with cond:
                cond.wait_for(lambda: sim.ended == SEQUENCES - unfinished, DEADLINE_S)
            settle(expected_running(r, limit, unfinished))
            if SEQUENCES - unfinished in RESIZES:
                before = len(sim.running)
                limit = RESIZES[SEQUENCES - unfinished]
                gate.resize(limit)  # up: admitted at once; down: none until below
                settle(max(before, min(limit, unfinished)))
        for t in threads:
            t.join(DEADLINE_S)
        self.assertEqual(sim.violations, [])
        self.assertEqual((sim.admitted, sim.ended, gate.in_flight), (SEQUENCES, SEQUENCES, 0))

    def test_acquire_timeout_keeps_the_order(self):
        gate = ThreadConcurrencyGate(1)
        self.assertTrue(gate.acquire())
        self.assertFalse(gate.acquire(timeout_s=0))  # at the front, gives up
        got = queue.Queue()
        first = threading.Thread(target=lambda: got.put(("first", gate.acquire())))
        first.start()
        with gate._cond:  # the first waiter has its ticket before the second asks
            gate._cond.wait_for(lambda: gate._next_ticket == 3, DEADLINE_S)
        self.assertFalse(gate.acquire(timeout_s=0.01))  # behind it, gives up
        gate.release()
        self.assertEqual(got.get(timeout=DEADLINE_S), ("first", True))
        gate.release()
        self.assertTrue(gate.acquire(timeout_s=DEADLINE_S))  # nobody stale in the way
        gate.release()
        self.assertRaises(RuntimeError, gate.release)
        first.join(DEADLINE_S)

    def test_limits(self):
        gate = ThreadConcurrencyGate(0)
        self.assertEqual(gate.limit, 1)
        gate.resize(-3)
        self.assertEqual(gate.limit, 1)
        with gate:
            self.assertEqual(gate.in_flight, 1)
        self.assertEqual(gate.in_flight, 0)


class AsyncGate(unittest.TestCase):
    def test_continuous_admission_under_resizes(self):
        asyncio.run(self._run())

    async def _run(self):
        gate = ConcurrencyGate(FIRST_LIMIT)
        sim = Simulation(gate)
        cond = asyncio.Condition()
        ends = {k: asyncio.Event() for k in range(SEQUENCES)}

        async def sequence():
            async with gate:
                async with cond:
                    k = sim.admit()
                    cond.notify_all()
                await ends[k].wait()
                async with cond:
                    del sim.running[k]
                    sim.ended += 1
                    cond.notify_all()

        async def settle(n):
            async with cond:
                await asyncio.wait_for(cond.wait_for(lambda: len(sim.running) == n), DEADLINE_S)

        tasks = [asyncio.ensure_future(sequence()) for _ in range(SEQUENCES)]
        await settle(min(FIRST_LIMIT, SEQUENCES))
        limit = FIRST_LIMIT
        while sim.running:
            r, k = len(sim.running), sim.next_to_end()
            unfinished = SEQUENCES - sim.ended - 1
            ends[k].set()
            async with cond:
                await asyncio.wait_for(
                    cond.wait_for(lambda: sim.ended == SEQUENCES - unfinished), DEADLINE_S)
            await settle(expected_running(r, limit, unfinished))
            if SEQUENCES - unfinished in RESIZES:
                before = len(sim.running)
                limit = RESIZES[SEQUENCES - unfinished]
                await gate.resize(limit)
                await settle(max(before, min(limit, unfinished)))
        await asyncio.wait_for(asyncio.gather(*tasks), DEADLINE_S)
        self.assertEqual(sim.violations, [])
        self.assertEqual((sim.admitted, sim.ended, gate.in_flight), (SEQUENCES, SEQUENCES, 0))

    def test_cancelled_waiter_gives_its_place_back(self):
        async def run():
            gate = ConcurrencyGate(1)
            await gate.__aenter__()
            waiter = asyncio.ensure_future(gate.__aenter__())
            await asyncio.sleep(0)  # let it queue (a scheduling step, not a wait for time)
            waiter.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await waiter
            await gate.__aexit__(None, None, None)
            self.assertEqual(gate.in_flight, 0)
            async with gate:
                self.assertEqual(gate.in_flight, 1)
        asyncio.run(run())

    def test_created_outside_a_loop(self):
        gate = ConcurrencyGate(2)  # Python 3.8/3.9 bound asyncio primitives here; not this

        async def run():
            async with gate:
                return gate.in_flight
        self.assertEqual(asyncio.run(run()), 1)
        self.assertEqual(asyncio.run(run()), 1)  # another loop later: still usable


class LoopThread:
    """An asyncio loop running in a thread: the engine side of the asyncio gate."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(DEADLINE_S)

    def stop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(DEADLINE_S)
        self.loop.close()


class ResizeFromAnotherThread(unittest.TestCase):
    def test_waiters_admitted_by_resize_threadsafe(self):
        lt = LoopThread()
        try:
            async def make():
                return ConcurrencyGate(1), asyncio.Event()
            gate, release = lt.run(make())
            holders = []

            async def hold():
                async with gate:
                    await release.wait()

            async def start(n):
                holders.extend(asyncio.ensure_future(hold()) for _ in range(n))
                while gate.in_flight < 1 or len(gate._waiters) < n - 1:
                    await asyncio.sleep(0)  # scheduling steps until they queue
                return gate.in_flight

            self.assertEqual(lt.run(start(4)), 1)
            gate.resize_threadsafe(3)  # from this thread: through call_soon_threadsafe

            async def in_flight():
                return gate.limit, gate.in_flight
            self.assertEqual(lt.run(in_flight()), (3, 3))
            lt.loop.call_soon_threadsafe(release.set)

            async def drained():
                await asyncio.gather(*holders)
                return gate.in_flight
            self.assertEqual(lt.run(drained()), 0)
        finally:
            lt.stop()
        gate.resize_threadsafe(5)  # a closed loop: ignored, never raises


class Follower(unittest.TestCase):
    def test_resizes_both_kinds_on_a_new_concurrency(self):
        agent = StepAgent(concurrency=4, group_size=8)
        lt = LoopThread()
        client = AgentClient(agent.url, timeout_s=5.0)
        changes = queue.Queue()
        tgate = ThreadConcurrencyGate(1)

        async def make():
            return ConcurrencyGate(1)
        agate = lt.run(make())

        async def limit():
            return agate.limit
        f = CapFollower(client, [tgate, agate], wait_s=5.0, on_change=changes.put)
        try:
            f.start()
            self.assertEqual(changes.get(timeout=DEADLINE_S)["concurrency"], 4)
            self.assertEqual((tgate.limit, lt.run(limit())), (4, 4))
            agent.decide(concurrency=9)
            self.assertEqual(changes.get(timeout=DEADLINE_S)["concurrency"], 9)
            self.assertEqual((tgate.limit, lt.run(limit())), (9, 9))
            client.actuation()  # the training loop reads the newest first: not waited past
            agent.decide(group_size=16)  # the concurrency unchanged: no resize
            agent.decide(concurrency=2)
            a = changes.get(timeout=DEADLINE_S)
            self.assertEqual((a["concurrency"], a["seq"]), (2, 4))
            self.assertEqual((tgate.limit, lt.run(limit()), f.concurrency), (2, 2, 2))
        finally:
            f.stop(timeout_s=0)
            agent.decide()  # wakes its long-poll
            self.assertTrue(f.stop())
            agent.stop()
            lt.stop()

    def test_unheard_agent_applies_the_fallback_and_stops_at_once(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            url = "http://127.0.0.1:%d" % s.getsockname()[1]
        client = AgentClient(url, safe_concurrency=3)
        gate = ThreadConcurrencyGate(8)
        changes = queue.Queue()
        f = CapFollower(client, [gate], retry_s=600.0, on_change=changes.put).start()
        a = changes.get(timeout=DEADLINE_S)
        self.assertTrue(a["reason"].startswith("fallback"))
        self.assertEqual(gate.limit, 3)
        self.assertTrue(f.stop(timeout_s=DEADLINE_S))  # wakes its retry wait


class BatchedCost(unittest.TestCase):
    def test_chunks_lose_occupancy_with_long_tails(self):
        """The same durations, cap 8: a chunk lasts as long as its longest sequence."""
        cap, lengths = 8, durations()
        chunks = list(batched(lengths, cap))
        busy = sum(lengths)
        chunked = busy / (cap * sum(max(c) for c in chunks))
        # Continuous admission (simulated as above): the cap is kept while work remains.
        running, now, ends = [], 0.0, []
        for d in lengths:
            if len(running) == cap:
                now = min(running)
                running.remove(now)
            running.append(now + d)
            ends.append(now + d)
        continuous = busy / (cap * max(ends))
        self.assertLess(chunked, 0.4)  # 0.26 with this draw
        self.assertGreater(continuous, 2 * chunked)  # 0.74, the end's drain included


if __name__ == "__main__":
    unittest.main()
