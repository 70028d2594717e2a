#!/usr/bin/env python3
"""docs/DILOCO.md's results: `headroom diloco local` on 4 workers against the data-parallel
baseline on the same tokens, over H (inner steps per round), and the same run with churn.

A run whose summary is already in OUT_DIR is not run again (delete NAME.json to rerun it).
Every run: the tiny model, 4 worker processes of one thread each, batch B x seq-len L bytes per
inner step, the same total inner steps per worker (STEPS), so the same tokens; DiLoCo with int8
pseudo-gradients. Writes each run's summary JSON to OUT_DIR and prints the tables (markdown).

With --pretrain-steps P every run starts from one pretrained model, as the DiLoCo paper's do:
one worker first trains P steps on the whole batch (K x B windows, data-parallel's batch), and
its checkpoint is every run's --init-checkpoint.

Usage: diloco_results.py HEADROOM OUT_DIR [--steps N] [--h 25,50,100,200] [--fp32-h H,...]
                         [--mean-h H,...] [--stream-h H,... --fragments N] [--batch B]
                         [--seq-len L] [--workers K] [--pretrain-steps P]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time


def run(headroom, out, name, args, saved=False):
    path = os.path.join(out, name)
    if saved or os.path.exists(path + ".json"):  # a run already done (delete it to rerun)
        with open(path + ".json") as f:
            return json.load(f)
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
    ap.add_argument("--h", default="10,25,50,100,200,400")
    ap.add_argument("--fp32-h", default="", help="H values also run with fp32 pseudo-gradients")
    ap.add_argument("--mean-h", default="",
                    help="H values also run with --aggregate mean (reduce-scatter, no screen)")
    ap.add_argument("--stream-h", default="",
                    help="H values also run streamed (--stream-fragments, --fragments of them)")
    ap.add_argument("--fragments", type=int, default=4, help="fragments of the streamed runs")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pretrain-steps", type=int, default=0,
                    help="every run starts from a model pretrained this many steps")
    ap.add_argument("--saved", action="store_true",
                    help="print the tables from the runs already in OUT_DIR")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    # A round deadline beyond any round: on a machine shared by 4 workers nobody is left out for
    # being slow, so the runs differ by H alone (the deadline has its own tests).
    common = ["--workers", str(a.workers), "--batch", str(a.batch), "--seq-len", str(a.seq_len),
              "--seed", str(a.seed), "--val-windows", "256", "--round-deadline-s", "120"]
    start = "the seed's initialisation"
    if a.pretrain_steps > 0:
        pre = run(a.headroom, a.out, "pretrain",
                  ["--workers", "1", "--batch", str(a.batch * a.workers), "--seq-len", str(a.seq_len),
                   "--seed", str(a.seed), "--val-windows", "256", "--mode", "ddp", "--threads", "2",
                   "--inner-steps", "100", "--rounds", str(a.pretrain_steps // 100)], a.saved)
        common += ["--init-checkpoint", pre["checkpoint"]]
        start = (f"a model pretrained {a.pretrain_steps} steps of {a.batch * a.workers} x "
                 f"{a.seq_len} bytes on one worker (val loss {pre['final_val_loss']:.4f})")
    hs = [int(x) for x in a.h.split(",")]
    # DDP: rounds of 100 steps (its loss curve and hash checks every 100 steps), same steps.
    ddp_h = 100
    ddp = run(a.headroom, a.out, "ddp", common + ["--mode", "ddp", "--inner-steps", str(ddp_h),
                                                  "--rounds", str(a.steps // ddp_h),
                                                  "--eval-every", "1"], a.saved)
    # Every DiLoCo run reports its tokens, time and energy to DDP's final loss (to_target).
    target = ["--target-loss", repr(ddp["final_val_loss"])]
    rows = []
    for h in hs:
        rows.append((h, run(a.headroom, a.out, f"diloco-h{h}",
                            common + target + ["--inner-steps", str(h), "--rounds", str(a.steps // h)],
                            a.saved)))
    fp32 = []
    for h in [int(x) for x in a.fp32_h.split(",") if x]:
        fp32.append((h, run(a.headroom, a.out, f"diloco-fp32-h{h}",
                            common + target + ["--compress", "none", "--inner-steps", str(h),
                                               "--rounds", str(a.steps // h)], a.saved)))
    extra = []  # (label, flags) runs beside the int8 trimmed-mean ones
    for h in [int(x) for x in a.mean_h.split(",") if x]:
        extra.append(("int8, mean", h, f"diloco-mean-h{h}", ["--aggregate", "mean"]))
    for h in [int(x) for x in a.stream_h.split(",") if x]:
        extra.append((f"int8, streamed ({a.fragments} fragments)", h,
                      f"diloco-stream{a.fragments}-h{h}", ["--stream-fragments", str(a.fragments)]))
    more = [(label, h, run(a.headroom, a.out, name,
                           common + target + flags + ["--inner-steps", str(h),
                                                      "--rounds", str(a.steps // h)], a.saved))
            for label, h, name, flags in extra]
    flags = "".join(f" --{k.replace('_', '-')} {v}" for k, v in
                    (("h", a.h), ("fp32_h", a.fp32_h), ("mean_h", a.mean_h),
                     ("stream_h", a.stream_h), ("pretrain_steps", a.pretrain_steps)) if v)
    print(f"\n`scripts/diloco_results.py build/bin/headroom {a.out}{flags}` ({a.workers} "
          f"workers, tiny model, {a.steps} inner steps each of {a.batch} x {a.seq_len} bytes: "
          f"{ddp['tokens']:,} tokens per run, from {start})\n")
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
    for h, j in fp32:
        line("diloco, fp32", h, j)
    for label, h, j in more:
        line(f"diloco, {label}", h, j)
    energy_to_target(ddp, [("int8", h, j) for h, j in rows] + [("fp32", h, j) for h, j in fp32]
                     + more)
    projection(rows, ddp, a)
    return 0


def split_line(e, share):
    """energy_j's parts (docs/DILOCO.md, "Energy to a target loss") times a share, in J."""
    return [share * e[k] for k in ("compute", "network", "idle", "other_cpu")]


# Energy to DDP's final loss (docs/DILOCO.md, "Energy to a target loss"). DDP: its whole run (the
# target is its own final loss). DiLoCo: its to_target, split in the run's proportions. Every
# line: measured CPU seconds, waiting seconds or bytes, times a modelled figure (the run's flags).
def energy_to_target(ddp, runs):
    target = ddp["final_val_loss"]
    ddp_e = ddp["energy_j"]
    ddp_total = ddp_e["compute"] + ddp_e["coordination"]
    print(f"\nEnergy to DDP's final loss ({target:.4f} nats/byte). compute = measured CPU s "
          "computing x 10 W/core; network = measured bytes x J/byte (modelled: between "
          "datacentres, 2024 equipment, as the runs' --network-j-per-byte); idle = measured s "
          "waiting x 3 W/worker (modelled); other CPU = measured CPU s not computing x 10 W/core; "
          "extra compute = the compute of the tokens beyond DDP's. A CPU-scale model on this "
          "machine: the shares are the tiny model's, not a 1B model's.\n")
    print("| run | H | reached | tokens | wall | energy (J) | compute | network | idle | other CPU "
          "| coordination share | extra compute vs DDP (J) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")

    def row(name, h, reached, tokens, wall_s, total, parts, extra):
        coordination = sum(parts[1:])
        print(f"| {name} | {h} | {reached} | {tokens:,} | {wall_s:,.0f} s | {total:,.0f} | "
              + " | ".join(f"{p:,.0f}" for p in parts)
              + f" | {100 * coordination / total if total else 0:.1f} % | {extra} |")
    row("ddp", 1, "yes (its final loss)", ddp["tokens"], ddp["wall_s"], ddp_total,
        split_line(ddp_e, 1.0), "0")
    for codec, h, j in runs:
        t = j.get("to_target")
        e = j["energy_j"]
        if t is None or "network" not in e:
            print(f"| diloco, {codec} | {h} | (a run saved before --target-loss: delete it to rerun) "
                  "| | | | | | | | | |")
            continue
        total = e["compute"] + e["coordination"]
        share = t["energy_j"] / total if total else 0.0
        compute_per_token = e["compute"] / j["tokens"] if j["tokens"] else 0.0
        extra = (f"{(t['tokens'] - ddp['tokens']) * compute_per_token:,.0f}" if t["reached"]
                 else f"> {max(0, j['tokens'] - ddp['tokens']) * compute_per_token:,.0f}")
        row(f"diloco, {codec}", h, "yes" if t["reached"] else "no (whole run: a lower bound)",
            t["tokens"], t["wall_s"], t["energy_j"], split_line(e, share), extra)


# The projection (docs/DILOCO.md, "Overhead on a real network"): one round's compute H x t_step
# against its exchange and coordination, with nothing overlapped (as the worker does it).
#   exchange     = (k - 1) (F / B + RTT / 2)            ring all-gather of frames of F bytes
#   coordination = 6 RTT (etcd: arrive, group, hash put and read, agreed) + 3 RTT (Gloo's
#                  rendezvous and connections)
#   utilisation  = compute / (compute + exchange + coordination)
# DDP per step: 2 (k - 1) (4n / k / B + RTT / 2) (ring all-reduce of fp32 gradients).
def projection(rows, ddp, a):
    bandwidth_bps = 1e9 / 8  # 1 Gbit/s in bytes/s
    rtt_s = 0.050
    k = a.workers
    # This machine's CPU seconds per inner step: the H = 100 run's workers (their own JSON), CPU
    # time rather than wall time, since 4 workers share this machine's 2 cores.
    step_cpu_s = None
    for h, j in rows:
        cpu = steps = 0.0
        for path in glob.glob(os.path.join(j["out"], "worker-*.json")):
            with open(path) as f:
                w = json.load(f)
            cpu += w["worker"]["cpu_seconds"]["compute"]
            steps += w["worker"]["rounds_contributed"] * h
        if steps and (h == 100 or step_cpu_s is None):
            step_cpu_s = cpu / steps
    frame = lambda n: 28 + 8 + 4 * -(-n // 256) + n + 32
    cases = [("tiny (this machine's CPU)", 495360, step_cpu_s),
             ("1B parameters (one H100, 0.5 M tokens/step at 40 % MFU: 7.6 s/step)", 1_000_000_000,
              6 * 1e9 * 0.5e6 / (0.4 * 989e12))]
    print(f"\nProjected utilisation (compute / wall), {k} workers, 1 Gbit/s, 50 ms RTT, nothing "
          "overlapped; INTELLECT-1: 83 % across three continents, 96 % within the US\n")
    print("| model | step | H | compute per round | exchange | coordination | utilisation | "
          "DDP utilisation |")
    print("|---|---|---|---|---|---|---|---|")
    for name, n, t_step in cases:
        if t_step is None:
            continue
        ddp_step = 2 * (k - 1) * (4 * n / k / bandwidth_bps + rtt_s / 2)
        for h in (25, 100, 500):
            compute = h * t_step
            exchange = (k - 1) * (frame(n) / bandwidth_bps + rtt_s / 2)
            coordination = 9 * rtt_s
            util = compute / (compute + exchange + coordination)
            print(f"| {name} | {t_step:.3g} s | {h} | {compute:.3g} s | {exchange:.3g} s | "
                  f"{coordination:.2f} s | {100 * util:.1f} % | {100 * t_step / (t_step + ddp_step):.1f} % |")


if __name__ == "__main__":
    sys.exit(main())
