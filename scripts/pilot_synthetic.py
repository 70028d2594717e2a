#!/usr/bin/env python3
"""A synthetic site pilot with a known effect, for `headroom pilot report` (docs/PILOT.md).

Writes OUT/block<k>.csv (long CSV: t_s,gpu,power_w,tokens; 1 s samples) and OUT/BLOCKS.csv.
Blocks alternate in pairs, controlled or uncontrolled first at random (seeded). A block's power
follows a slow AR(1) level (lag-1 autocorrelation PHI between blocks) and a GRPO-like
rollout/update cycle; the controlled blocks draw (1 + EFFECT) x the power and make the same
tokens, so the injected effect is EFFECT on energy and 1 / (1 + EFFECT) - 1 on tokens/MWh.
Standard library only.
"""
import argparse
import math
import os
import random


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--block-s", type=int, default=600)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--effect", type=float, default=-0.10, help="on power, e.g. -0.10")
    ap.add_argument("--phi", type=float, default=0.5, help="lag-1 autocorrelation of levels")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    rows = ["block,arm,trace,job"]
    level = 0.0
    for k in range(2 * a.pairs):
        if k % 2 == 0:
            controlled_first = rng.random() < 0.5
        controlled = (k % 2 == 0) == controlled_first
        # The block's level: AR(1), 5 % standard deviation.
        level = a.phi * level + math.sqrt(1 - a.phi * a.phi) * 0.05 * rng.gauss(0, 1)
        scale = (1 + level) * ((1 + a.effect) if controlled else 1.0)
        name = f"block{k}.csv"
        with open(os.path.join(a.out, name), "w") as f:
            f.write("t_s,gpu,power_w,tokens\n")
            for t in range(a.block_s):
                rollout = (t % 60) < 45
                for g in range(a.gpus):
                    base = 520.0 if rollout else 650.0
                    p = scale * (base + 25.0 * rng.gauss(0, 1))
                    tokens = 900 if rollout else 0
                    f.write(f"{t},{g},{p:.2f},{tokens}\n")
        rows.append(f"{k},{'controlled' if controlled else 'uncontrolled'},{name},"
                    f"{'job-a' if k < a.pairs else 'job-b'}")
    with open(os.path.join(a.out, "BLOCKS.csv"), "w") as f:
        f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
