#!/usr/bin/python3
"""Three torch.distributed ranks (gloo, 127.0.0.1) on the headroom-client adapters, against
in-process fake agents (package_test.FakeAgent, fake_agent.StepAgent):
  - rank0_actuation (a collective): every rank gets the decision rank 0 read; only rank 0 asked
    the agent;
  - HeadroomCallback.on_step_begin, no collective: every rank reads the agent itself, for its
    step (a StepAgent fixing each step's answer at its first read), and takes the site's hold
    at its own boundary -- all three are held at once, none waits in a collective -- and after
    it gets the step's group size even though the decision changed meanwhile; on_phase reports
    once (rank 0); refresh() gives every rank the new concurrency and keeps the group size;
  - rank0_actuation on a group whose rank 0 is global rank 1 (its own fake agent).
No sleeps: a rank's hold blocks on a line from this process, every wait has a deadline.

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


def rank_main(rank, port, url_a, url_b, url_c):
    """One rank: the steps the parent checks, each result as a JSON line on stdout."""
    from datetime import timedelta

    import torch.distributed as dist
    sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
    from headroom_client import AgentClient, HeadroomCallback, rank0_actuation

    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=WORLD, timeout=timedelta(seconds=DEADLINE_S))
    client = AgentClient(url_a, timeout_s=10.0) if rank == 0 else None

    emit(rank, "rank0_actuation", a=rank0_actuation(client))

    def held(hold_s):  # a rank's sleep: until the parent releases it
        emit(rank, "sleeping", hold_s=hold_s)
        if sys.stdin.readline().strip() != "release":
            raise SystemExit("rank %d: not released" % rank)

    cb = HeadroomCallback(AgentClient(url_c, timeout_s=10.0), sleep=held)  # every rank its own
    emit(rank, "entered")
    a = cb.on_step_begin(step=5, tokens=10)
    emit(rank, "step_begun", a=a, group_size=cb.group_size, step=cb.step)
    cb.on_phase("rollout", in_flight=2)
    if sys.stdin.readline().strip() != "refresh":
        raise SystemExit("rank %d: no refresh" % rank)
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
    from fake_agent import StepAgent
    from package_test import FakeAgent, decision

    agent_a = FakeAgent(decision(1, concurrency=4, group_size=8))  # rank0_actuation
    agent_b = FakeAgent(decision(9, concurrency=5, group_size=4, reason="agent b"))
    agent_c = StepAgent(concurrency=4, group_size=16)  # HeadroomCallback, every rank
    agent_c.hold_next_step(2.5, 1)  # step 5's first read fixes this hold
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
                                      str(rank), str(port), agent_a.url, agent_b.url,
                                      agent_c.url],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=err, text=True, env=env)
                err.close()
                procs.append(p)
                threading.Thread(target=pump, args=(p, events), daemon=True).start()
            run(procs, events, deadline, agent_a, agent_b, agent_c)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
            agent_a.stop()
            agent_b.stop()
            agent_c.stop()
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


def run(procs, events, deadline, agent_a, agent_b, agent_c):
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

        # The hold: every rank sleeps at its own boundary, all three at once (none waits in a
        # collective), and none began the step.
        wait_for(*[(r, "sleeping") for r in all_ranks])
        for r in all_ranks:
            check(seen[(r, "sleeping")]["hold_s"] == 2.5, "rank %d takes the step's hold" % r)
        check(not any(e == "step_begun" for _, e in order),
              "no rank began the step while held")
        agent_c.decide(concurrency=3, group_size=32)  # meanwhile: not step 5's any more
        for p in procs:
            p.stdin.write("release\n")
            p.stdin.flush()
        wait_for(*[(r, "step_begun") for r in all_ranks])
        for r in all_ranks:
            e = seen[(r, "step_begun")]
            check(e["a"]["step"] == 5 and e["a"]["hold_id"] == 1 and e["group_size"] == 16
                  and e["step"] == 5,
                  "rank %d: held once, then step 5's group size (fixed at its first read): %s"
                  % (r, e))

        agent_c.decide(concurrency=7)
        for p in procs:
            p.stdin.write("refresh\n")
            p.stdin.flush()
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
            check(agent_a.requests == 1, "only rank 0 asked agent a, once: %d requests"
                  % agent_a.requests)
        with agent_c.cond:
            reports = [(b["step"], b["phase"], b.get("group_size")) for b, _ in agent_c.reports]
            reads = [p for p in agent_c.paths if p.startswith("/v1/actuation")]
        check(reads.count("/v1/actuation?step=5") == 2 * WORLD and len(reads) == 3 * WORLD,
              "every rank read step 5 twice (before and after the hold) and refreshed: %s"
              % reads)
        check(reports == [(5, "idle", None), (5, "rollout", 16)],
              "reports: idle while held, then rollout once (rank 0): %s" % reports)
        with agent_b.lock:
            check(agent_b.requests == 1, "agent b asked once: %d" % agent_b.requests)
    except (TimeoutError, RuntimeError, subprocess.TimeoutExpired) as e:
        check(False, "%s (events: %s)" % (e, order))


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "--rank":
        rank_main(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6])
        sys.exit(0)
    sys.exit(main())
