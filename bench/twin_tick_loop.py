#!/usr/bin/python3
"""The twin's tick loop written plainly in Python with numpy: the peer of BM_TwinTicks.

Same mechanics as src/twin/twin.cc for a one-engine scenario: the GRPO step machine (rollout
with a min-heap of finish marks, log-prob, train, sync), decode curves, first-order lag, AR(1)
noise and the 1 s telemetry average. Prints ticks per second.

Usage: twin_tick_loop.py SCENARIO.toml [TICKS]
"""
import heapq
import math
import sys
import time
import tomllib

import numpy as np


def logistic(c, prefix, x):
    return c[prefix + "_b0"] + c[prefix + "_l"] / (1.0 + math.exp(-c[prefix + "_k"] * (x - c[prefix + "_x0"])))


def main():
    s = tomllib.load(open(sys.argv[1], "rb"))
    ticks = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
    r, hw, dyn = s["rollout"], s["hardware"], s["dynamics"]
    dt = 0.1
    n_min = r.get("decode_min_batch", 8.0)
    idle_loaded = hw["idle_loaded_w"]

    # Below n_min decode is memory-bound (src/twin/curves.h): step time t0 + c n and step energy
    # above idle-loaded e0 + e1 n, continued from the curves at n_min with value and slope.
    def slope(prefix, n):
        e = math.exp(-r[prefix + "_k"] * (math.log2(n) - r[prefix + "_x0"]))
        return r[prefix + "_l"] * r[prefix + "_k"] * e / (1 + e) ** 2 / (n * math.log(2))

    tps = max(logistic(r, "decode_tokens_per_s", math.log2(n_min)), 1e-12)
    tps_slope = slope("decode_tokens_per_s", n_min)
    t_min = n_min / tps
    c = max(0.0, (tps - n_min * tps_slope) / (tps * tps)) if tps_slope > 0 else 0.0
    t0 = t_min - c * n_min
    above = max(0.0, logistic(r, "decode_power", math.log2(n_min)) - idle_loaded)
    x_min = above * t_min
    e1 = max(0.0, slope("decode_power", n_min) * t_min + above * c)
    e0 = x_min - e1 * n_min
    if e0 < 0:
        e0, e1 = 0.0, x_min / n_min

    def stepping(n):
        return idle_loaded + (e0 + e1 * n) / (t0 + c * n)

    def decode_power(n):
        if n <= 0:
            return idle_loaded
        if n >= n_min:
            return logistic(r, "decode_power", math.log2(n))
        if n >= 1:
            return stepping(n)
        at_one = stepping(1.0) if n_min > 1 else logistic(r, "decode_power", math.log2(n_min))
        return idle_loaded + (at_one - idle_loaded) * n / min(1.0, n_min)

    def decode_tokens(n):
        if n <= 0:
            return 0.0
        if n >= n_min:
            return logistic(r, "decode_tokens_per_s", math.log2(n))
        return n / (t0 + c * n)

    rng = np.random.default_rng(1)
    a_up = 1 - math.exp(-dt / dyn["tau_up_s"])
    a_down = 1 - math.exp(-dt / dyn["tau_down_s"])
    sigma, rho = dyn["noise_w"], dyn["noise_rho"]
    innovation = sigma * math.sqrt(1 - rho * rho)
    window = np.full(10, idle_loaded)
    gpus = s["job"]["gpus"]

    state = {"phase": "rollout", "left": 0.0, "power": 0.0, "tokens": 0.0}
    pending, heap = [], []
    progress = [0.0]
    prefill = [0.0]

    def begin_step():
        lengths = np.clip(np.round(np.exp(math.log(r["length_median_tokens"]) + r["length_sigma"]
                                          * rng.standard_normal(r["prompts_per_step"] * r["group_size"]))),
                          1, r["max_new_tokens"])
        pending[:] = list(lengths[::-1])
        heap.clear()
        progress[0] = 0.0
        state["tokens"] = float(np.sum(lengths + r["prompt_tokens"]))
        state["phase"] = "rollout"

    def next_after(phase):
        if phase == "rollout":
            state.update(phase="logprob", power=s["logprob"]["power_w"],
                         left=state["tokens"] * s["logprob"]["passes"] / (gpus * s["logprob"]["tokens_per_s"]))
        elif phase == "logprob":
            state.update(phase="train", power=s["train"]["power_w"],
                         left=state["tokens"] / (gpus * s["train"]["tokens_per_s"]))
        elif phase == "train":
            state.update(phase="sync", power=s["sync"]["power_w"], left=s["sync"]["duration_s"])
        else:
            begin_step()

    begin_step()
    lagged, noise = idle_loaded, 0.0
    t0 = time.perf_counter()
    for tick in range(ticks):
        remaining, energy = dt, 0.0
        while remaining > 1e-12:
            if state["phase"] == "rollout":
                while len(heap) < r["concurrency"] and pending:
                    heapq.heappush(heap, progress[0] + pending.pop())
                    prefill[0] += r["prompt_tokens"] / r["group_size"]
                n, span = len(heap), remaining
                if prefill[0] > 0:
                    used = min(span, prefill[0] / r["prefill_tokens_per_s"])
                    prefill[0] = max(0.0, prefill[0] - used * r["prefill_tokens_per_s"])
                    energy += used * r["prefill_power_w"]
                    span -= used
                if n > 0 and span > 0:
                    progress[0] += decode_tokens(n) * span / n
                    while heap and heap[0] <= progress[0]:
                        heapq.heappop(heap)
                    energy += span * decode_power(n)
                    span = 0.0
                energy += span * idle_loaded
                remaining = 0.0
                if not heap and not pending:
                    next_after("rollout")
            else:
                used = min(remaining, state["left"])
                energy += used * state["power"]
                state["left"] -= used
                remaining -= used
                if state["left"] <= 1e-12:
                    next_after(state["phase"])
        target = energy / dt
        lagged += (target - lagged) * (a_up if target > lagged else a_down)
        noise = rho * noise + innovation * rng.standard_normal()
        power = max(0.0, lagged + noise)
        window[tick % 10] = power
        smoothed = window.mean()
    elapsed = time.perf_counter() - t0
    print(f"{ticks / elapsed:.0f} ticks/s ({ticks} ticks in {elapsed:.2f} s; last power {power:.1f} W, "
          f"smoothed {smoothed:.1f} W)")


if __name__ == "__main__":
    main()
