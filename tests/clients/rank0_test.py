#!/usr/bin/python3
"""Three torch.distributed ranks (gloo, 127.0.0.1) on the headroom-client adapters, rank 0
against an in-process fake agent (package_test.FakeAgent):
  - rank0_actuation: every rank gets the decision rank 0 read; only rank 0 asked the agent;
  - HeadroomCallback.on_step_begin: a site's hold taken by rank 0 holds every rank (ranks 1 and
    2 enter the step before rank 0's hold is released, and return with the decision rank 0
    reads only after it), and fixes the same group size everywhere; on_phase reports once;
    refresh() gives every rank the new concurrency and keeps the group size;
  - rank0_actuation on a group whose rank 0 is global rank 1 (its own fake agent).
No sleeps: rank 0's hold blocks on a line from this process, every wait has a deadline.

Usage: rank0_test.py. Exit 0 on success, 1 on a failure, 77 without torch (or gloo).
Internally, each rank runs this file with --rank.
"""

import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORLD = 3
DEADLINE_S = 100.0  # the whole test (ctest: 120 s); 12 s on 2 cores, torch's imports dominate

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def emit(rank, event, **fields):
    print(json.dumps(dict(rank=rank, event=event, **fields)), flush=True)


def rank_main(rank, port, url_a, url_b):
    """One rank: the steps the parent checks, each result as a JSON line on stdout."""
    from datetime import timedelta

    import torch.distributed as dist
    sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
    from headroom_client import AgentClient, HeadroomCallback, rank0_actuation

    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=WORLD, timeout=timedelta(seconds=DEADLINE_S))
    client = AgentClient(url_a, timeout_s=10.0) if rank == 0 else None

    emit(rank, "rank0_actuation", a=rank0_actuation(client))

    def held(hold_s):  # rank 0's sleep: until the parent releases it
        emit(rank, "sleeping", hold_s=hold_s)
        if sys.stdin.readline().strip() != "release":
            raise SystemExit("rank 0: not released")

    cb = HeadroomCallback(client, sleep=held)
    emit(rank, "entered")
    a = cb.on_step_begin(step=5, tokens=10)
    emit(rank, "step_begun", a=a, group_size=cb.group_size, step=cb.step)
    cb.on_phase("rollout", in_flight=2)
    cb.refresh()
    emit(rank, "refreshed", concurrency=cb.concurrency(), group_size=cb.group_size)

    # A group whose rank 0 is global rank 1, which reads its own agent (every rank creates it).
    sub = dist.new_group([1, 2])
    if rank in (1, 2):
        sub_client = AgentClient(url_b, timeout_s=10.0) if rank == 1 else None
        emit(rank, "subgroup", a=rank0_actuation(sub_client, group=sub))
    dist.barrier()
    dist.destroy_process_group()
    emit(rank, "done")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    try:
        import torch.distributed as dist
    except ImportError as e:
        print("rank0_test: skipped: torch is not importable (%s; scripts/setup.sh)" % e)
        return 77
    if not dist.is_available() or not dist.is_gloo_available():
        print("rank0_test: skipped: torch has no distributed/gloo")
        return 77
    sys.path.insert(0, HERE)
    from package_test import FakeAgent, decision

    # Rank 0 reads: rank0_actuation, the step boundary (a hold), after the hold, refresh.
    agent_a = FakeAgent(decision(1, concurrency=4, group_size=8),
                        decision(2, concurrency=4, group_size=8, hold_s=2.5, hold_id=1),
                        decision(3, concurrency=3, group_size=16, reason="after the hold"),
                        decision(4, concurrency=7, group_size=32))
    agent_b = FakeAgent(decision(9, concurrency=5, group_size=4, reason="agent b"))
    events = queue.Queue()
    procs = []
    deadline = time.monotonic() + DEADLINE_S
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo")
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for rank in range(WORLD):
                err = open(os.path.join(tmp, "rank%d.err" % rank), "w")
                p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank",
                                      str(rank), str(port), agent_a.url, agent_b.url],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=err, text=True, env=env)
                err.close()
                procs.append(p)
                threading.Thread(target=pump, args=(p, events), daemon=True).start()
            run(procs, events, deadline, agent_a, agent_b)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
            agent_a.stop()
            agent_b.stop()
            if failures:
                for rank in range(WORLD):
                    with open(os.path.join(tmp, "rank%d.err" % rank)) as f:
                        tail = f.read()[-2000:]
                    if tail:
                        print("rank %d stderr:\n%s" % (rank, tail))
    print("rank0_test:", "FAILED" if failures else "ok")
    return 1 if failures else 0


def pump(p, events):
    for line in p.stdout:
        try:
            events.put(json.loads(line))
        except ValueError:
            events.put({"rank": -1, "event": "noise", "line": line})
    events.put({"rank": -1, "event": "eof"})


def run(procs, events, deadline, agent_a, agent_b):
    seen = {}  # (rank, event) -> fields
    order = []

    def wait_for(*wanted):
        while not all(w in seen for w in wanted):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("still waiting for %s" % [w for w in wanted if w not in seen])
            try:
                e = events.get(timeout=left)
            except queue.Empty:
                continue
            if e["event"] == "eof" and any(p.poll() not in (None, 0) for p in procs):
                raise RuntimeError("a rank failed: exit %s" % [p.poll() for p in procs])
            seen[(e["rank"], e["event"])] = e
            order.append((e["rank"], e["event"]))

    try:
        all_ranks = range(WORLD)
        wait_for(*[(r, "rank0_actuation") for r in all_ranks])
        got = [seen[(r, "rank0_actuation")]["a"] for r in all_ranks]
        check(all(a == got[0] for a in got), "rank0_actuation: the same on every rank: %s" % got)
        check(got[0]["seq"] == 1, "rank0_actuation: rank 0's read")

        # The hold: rank 0 sleeps (blocked on our line) while ranks 1 and 2 are in the step.
        wait_for((0, "sleeping"), (1, "entered"), (2, "entered"))
        check(seen[(0, "sleeping")]["hold_s"] == 2.5, "rank 0 takes the site's hold")
        check(not any(e == "step_begun" for _, e in order),
              "no rank began the step while rank 0 was held")
        with agent_a.lock:
            check(agent_a.answers[0]["seq"] == 3, "the decision after the hold not yet read")
        procs[0].stdin.write("release\n")
        procs[0].stdin.flush()
        wait_for(*[(r, "step_begun") for r in all_ranks])
        for r in all_ranks:
            e = seen[(r, "step_begun")]
            check(e["a"]["seq"] == 3 and e["group_size"] == 16 and e["step"] == 5,
                  "rank %d: held, then the decision read after the hold: %s" % (r, e))

        wait_for(*[(r, "refreshed") for r in all_ranks])
        for r in all_ranks:
            e = seen[(r, "refreshed")]
            check((e["concurrency"], e["group_size"]) == (7, 16),
                  "rank %d: refresh: new concurrency, same group size: %s" % (r, e))

        wait_for((1, "subgroup"), (2, "subgroup"), *[(r, "done") for r in all_ranks])
        for r in (1, 2):
            check(seen[(r, "subgroup")]["a"]["reason"] == "agent b",
                  "rank %d: the subgroup's rank 0 (global rank 1) read it" % r)
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
            check(p.returncode == 0, "a rank exits 0: %s" % p.returncode)

        with agent_a.lock:
            reports = [(b["step"], b["phase"], b.get("group_size")) for b in agent_a.reports]
            check(agent_a.requests == 6, "only rank 0 asked agent a, once per read: %d requests "
                  "(4 reads, 2 reports)" % agent_a.requests)
        check(reports == [(5, "idle", None), (5, "rollout", 16)],
              "reports: idle while held, then rollout once: %s" % reports)
        with agent_b.lock:
            check(agent_b.requests == 1, "agent b asked once: %d" % agent_b.requests)
    except (TimeoutError, RuntimeError, subprocess.TimeoutExpired) as e:
        check(False, "%s (events: %s)" % (e, order))


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--rank":
        rank_main(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
        sys.exit(0)
    sys.exit(main())
