#!/usr/bin/python3
"""Derives the `h100-8b-ddp-train` scenario from the calibration traces of the shared 8x H100
training set: save1000 (a clean plateau) and save1 (a checkpoint every step). The validation
traces (save10, save50, save100, save500; save200 spare) are not read here.

Per-GPU levels are node power / 8. Segments are runs of one level class:
  idle (< 95 W), loaded (95-135 W), stall/checkpoint (135-400 W), training (> 400 W).

Slow storage. save1 checkpoints after every step, so its checkpoints are the gaps between the
steps' power spikes (> 187.5 W per GPU; 100 ms sampling never shows a 0.23 s step above
400 W): 21 take ~17 s, then from t = 474 s every checkpoint takes over a minute until the job is
killed. save1000's two checkpoints (t = 348 s, 600 s) are both fast. The twin models this as a
switch to slow storage at an exponential time after the first step: its mean is the censored
maximum-likelihood estimate (switches observed / time exposed in the fast state, counted from
each trace's first step to its first slow checkpoint, or to its last checkpoint when all were
fast), and the slow duration is the mean of the complete slow checkpoints, less the scripted
5 s SIGSTOP (t ~ 600 s) for the one that holds it.

Usage: derive_h100_ddp.py [DATA_DIR]   (default ../shared/power-data/h100-8gpu-training-traces)
"""
import os
import sys

import numpy as np
import pandas as pd

here = os.path.dirname(os.path.abspath(__file__))
root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    here, "..", "..", "shared", "power-data", "h100-8gpu-training-traces")


def segments(name):
    d = pd.read_csv(os.path.join(root, f"h100x8_llm8b_ddp_{name}.csv"))
    t = d.t_s.to_numpy()
    p = d.node_gpu_w.to_numpy() / 8
    cls = np.where(p > 400, "T", np.where(p > 135, "C", np.where(p > 95, "L", "I")))
    out, s = [], 0
    for i in range(1, len(t) + 1):
        if i == len(t) or cls[i] != cls[s]:
            out.append((cls[s], t[s], t[i - 1], p[s:i]))
            s = i
    return [x for x in out if len(x[3]) >= 3]


big = segments("save1000")
idle0 = big[0]
loaded = [x for x in big if x[0] == "L"][0]
trains = [x for x in big if x[0] == "T"]
ckpts = [x for x in big if x[0] == "C" and x[2] - x[1] > 5]
full = [x for x in trains if x[2] - x[1] > 200]  # the two complete 1000-step intervals
step_s = np.mean([x[2] - x[1] for x in full]) / 1000
train_w = np.mean(np.concatenate([x[3][len(x[3]) // 10:] for x in trains]))
ckpt_s = np.mean([x[2] - x[1] for x in ckpts])
stop_s = trains[-1][2]
# save1: a step and a checkpoint alternate; the checkpoint level follows from the mean.
one = segments("save1")
cycle = [x for x in one if x[0] == "C" and x[2] - x[1] > 100][0]
cycle_w = cycle[3].mean()
ckpt_w = (cycle_w * (step_s + ckpt_s) - train_w * step_s) / ckpt_s

# Slow storage (see the module docstring).
d1 = pd.read_csv(os.path.join(root, "h100x8_llm8b_ddp_save1.csv"))
t1 = d1.t_s.to_numpy()
spike = d1.node_gpu_w.to_numpy() / 8 > 187.5
edges = t1[1:][spike[1:] & ~spike[:-1]]  # each step's first sample
ckpt_starts = edges + step_s
ckpt_durations = np.diff(edges) - step_s
fast_s = np.median(ckpt_durations)
slow = ckpt_durations > 2 * fast_s
first_slow = int(np.argmax(slow))
stall_at_s, stall_s = 600.0, 5.0  # train_gpt_power.sh: SIGSTOP rank 0 for 5 s, ~600 s in
slow_durations = [d - (stall_s if start <= stall_at_s <= start + d else 0.0)
                  for start, d in zip(ckpt_starts[:-1][slow], ckpt_durations[slow])]
exposure_1 = ckpt_starts[first_slow] - edges[0]
train_start_1000 = trains[0][1]
exposure_1000 = ckpts[-1][1] - train_start_1000  # both checkpoints fast
switches = 1  # save1's; none in save1000
onset_mean_s = (exposure_1 + exposure_1000) / switches
print(f"save1: {len(ckpt_durations)} complete checkpoints, {int((~slow).sum())} fast "
      f"(median {fast_s:.1f} s), slow: {', '.join(f'{d:.1f}' for d in ckpt_durations[slow])} s "
      f"from t = {ckpt_starts[first_slow]:.1f} s")
print(f"checkpoint.slow_onset_mean_s = {onset_mean_s:.0f}   # exposure {exposure_1:.1f} s (save1) "
      f"+ {exposure_1000:.1f} s (save1000), 1 switch")
print(f"checkpoint.slow_duration_s = {np.mean(slow_durations):.1f}   # mean of "
      f"{', '.join(f'{d:.1f}' for d in slow_durations)} s")
print(f"idle_before_s = {idle0[2] - idle0[1]:.1f}   # idle at {idle0[3].mean():.0f} W")
print(f"startup_s = {loaded[2] - loaded[1]:.1f}      # model load at {loaded[3].mean():.0f} W")
print(f"stop_at_s = {stop_s:.1f}     # end of the last training segment (SIGKILL)")
print(f"step_s = {step_s:.4f}  -> train.tokens_per_s = {4096 / step_s:.0f} at 4096 tokens/GPU/step")
print(f"train.power_w = {train_w:.1f}")
print(f"checkpoint.duration_s = {ckpt_s:.2f}")
print(f"checkpoint.power_w = {ckpt_w:.1f}   # save1: cycle mean {cycle_w:.1f} W over step + checkpoint")
