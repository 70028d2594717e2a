#!/usr/bin/python3
"""A fake GRPO trainer driven by a headroom agent, end to end, with no GPU.

Start an agent on the twin, then this trainer:

    headroom agent --source twin --scenario a100-7b-tp1 --controller ppo \\
        --policy policies/a100-7b-tp1.json --speed 20 --listen 127.0.0.1:10470 &
    python3 examples/fake_trainer.py --agent http://127.0.0.1:10470 --steps 5

What it shows is the integration a real trainer needs: generation requests pass an asyncio
gate resized live from the agent's long-poll; the group size is read at each step boundary;
the trainer reports its phase, step and tokens. The "generation" here sleeps instead of
decoding (the power the agent sees comes from its own twin).
"""

import argparse
import asyncio
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "clients", "python"))
from headroom_client import AgentClient, ConcurrencyGate  # noqa: E402


async def follow(client, gate, stop, changes, until_agent_stops):
    """Resizes the gate whenever the agent decides something new (long-poll)."""
    while not stop.is_set():
        a = await asyncio.to_thread(client.actuation, 2.0)
        if until_agent_stops and not client.reachable:
            stop.set()
            break
        if a["concurrency"] != gate.limit:
            changes[0] += 1
        await gate.resize(a["concurrency"])


async def generate(gate, rng, tokens):
    async with gate:
        n = int(rng.lognormvariate(5.7, 0.8))  # a completion of ~300 tokens
        await asyncio.sleep(n / 4000.0)        # 4,000 simulated tokens per second
        tokens[0] += n


async def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--agent", default="http://127.0.0.1:10470")
    p.add_argument("--token")
    p.add_argument("--steps", type=int, default=5,
                   help="GRPO steps to run; 0: until the agent stops answering")
    p.add_argument("--prompts", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    client = AgentClient(args.agent, token=args.token, safe_concurrency=1, safe_group_size=8)
    rng = random.Random(args.seed)
    gate = ConcurrencyGate(client.actuation()["concurrency"])
    stop = asyncio.Event()
    changes = [0]
    follower = asyncio.create_task(follow(client, gate, stop, changes, args.steps == 0))
    tokens = [0]
    step = 0
    held_s = 0.0
    while (args.steps == 0 and not stop.is_set()) or step < args.steps:
        a = client.actuation()  # read at the step boundary
        # A site's holds: its staggering (once per hold), or not admitted yet (until it is).
        while (hold := client.take_hold(a)) > 0:
            client.report(step, "idle", tokens[0], 0)
            await asyncio.sleep(hold)
            held_s += hold
            print("step %d: held %.1f s by the site" % (step, hold), flush=True)
            a = client.actuation()
        group = a["group_size"]
        client.report(step, "rollout", tokens[0], gate.in_flight, group_size=group)
        await asyncio.gather(*(generate(gate, rng, tokens) for _ in range(args.prompts * group)))
        client.report(step, "train", tokens[0], 0, group_size=group)
        await asyncio.sleep(0.05)
        print("step %d: group %d, concurrency %d, tokens %d" % (step, group, gate.limit, tokens[0]),
              flush=True)
        step += 1
    stop.set()
    await follower
    print("fake trainer: %d steps, %d concurrency changes followed, %.1f s held" %
          (step, changes[0], held_s))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
