#!/usr/bin/env python3
"""docs/DILOCO.md's results: `headroom diloco local` on 4 workers against the data-parallel
baseline on the same tokens, over H (inner steps per round), and the same run with churn.

Every run: the tiny model, 4 worker processes of one thread each, batch B x seq-len L bytes per
inner step, the same total inner steps per worker (STEPS), so the same tokens; DiLoCo with int8
pseudo-gradients. Writes each run's summary JSON to OUT_DIR and prints the tables (markdown).

Usage: diloco_results.py HEADROOM OUT_DIR [--steps N] [--h 25,50,100,200] [--batch B]
                         [--seq-len L] [--workers K]
"""
import argparse
import json
import os
import subprocess
import sys
import time


def run(headroom, out, name, args):
    path = os.path.join(out, name)
    argv = [headroom, "diloco", "local", "--out", path, "--json"] + args
    t0 = time.time()
    res = subprocess.run(argv, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"diloco_results: {' '.join(argv)}: exit {res.returncode}: {res.stderr.strip()[-400:]}")
    j = json.loads(res.stdout)
    print(f"diloco_results: {name}: loss {j['final_val_loss']:.4f}, {j['bytes_sent_total']:,} bytes, "
          f"{time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    with open(path + ".json", "w") as f:
        json.dump(j, f, indent=2)
    return j


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("headroom")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=1600, help="inner steps per worker")
    ap.add_argument("--h", default="50,100,200,400")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    common = ["--workers", str(a.workers), "--batch", str(a.batch), "--seq-len", str(a.seq_len),
              "--seed", str(a.seed), "--val-windows", "256"]
    hs = [int(x) for x in a.h.split(",")]
    # DDP: rounds of 100 steps (its loss curve and hash checks every 100 steps), same steps.
    ddp_h = 100
    ddp = run(a.headroom, a.out, "ddp", common + ["--mode", "ddp", "--inner-steps", str(ddp_h),
                                                  "--rounds", str(a.steps // ddp_h),
                                                  "--eval-every", "1"])
    rows = []
    for h in hs:
        rows.append((h, run(a.headroom, a.out, f"diloco-h{h}",
                            common + ["--inner-steps", str(h), "--rounds", str(a.steps // h)])))
    print(f"\n`scripts/diloco_results.py build/bin/headroom build/diloco-results` ({a.workers} workers, "
          f"tiny model, {a.steps} inner steps each of {a.batch} x {a.seq_len} bytes: "
          f"{ddp['tokens']:,} tokens per run)\n")
    print("| run | H | rounds | final val loss (nats/byte) | vs ddp | bits/byte | bytes sent | "
          "ddp bytes / these | overhead | energy: compute / coordination (J) |")
    print("|---|---|---|---|---|---|---|---|---|---|")

    def line(name, h, j):
        ratio = ddp["bytes_sent_total"] / j["bytes_sent_total"] if j["bytes_sent_total"] else 0
        print(f"| {name} | {h} | {j['rounds']} | {j['final_val_loss']:.4f} | "
              f"{100 * (j['final_val_loss'] / ddp['final_val_loss'] - 1):+.2f} % | "
              f"{j['val_bits_per_byte']:.3f} | {j['bytes_sent_total']:,} | {ratio:,.0f}x | "
              f"{100 * j['overhead_fraction']:.1f} % | {j['energy_j']['compute']:,.0f} / "
              f"{j['energy_j']['coordination']:,.0f} |")
    line("ddp (fp32 gradients every step)", 1, ddp)
    for h, j in rows:
        line("diloco, int8", h, j)
    return 0


if __name__ == "__main__":
    sys.exit(main())
