#!/usr/bin/env python3
"""Decode power below and around the lowest measured batch, by occupancy band (issue 39 item 4).

Compares, against every public measurement of 8B-class dense decode on H100 in shared/power-data,
four ways of drawing the decode curve of a scenario:

  shipped       the scenario's own logistics (h100-8b-tp1: the ML.ENERGY Llama-3.1-8B fit),
                continued below the lowest measured batch n_min by DecodeCurves::Below()
                (src/twin/curves.cc: step time t0 + c n and step energy above idle-loaded
                e0 + e1 n, value and slope taken from the logistics at n_min)
  calibrated    what `headroom twin calibrate --mlenergy` fits for another model (default
                Qwen/Qwen3-8B, task lm-arena-chat: the calibration split), same Below()
  ... old       the calibrated logistics with the recipe Below() replaced (commit bbb5637):
                power on log2(1 + n) from idle-loaded to P(n_min), throughput n / n_min x TPS(n_min)
  ... anchored  the proposal: t0 = W / B and e0 = eps x W, W the weight bytes one GPU streams
                per step, B and eps one pair of constants per GPU (and TP class) taken from the
                intercepts of ML.ENERGY's batch 8-16-32 rows of the calibration split; c and e1
                from the curves' values at n_min (continuous there)

Bands: n 1-2, 3-4, 5-8, 9-32, 33+. ML.ENERGY v3 starts at batch 8 and v2 (A100, an old vLLM)
at 16, so the two lowest bands have no public measurement in shared/power-data; the ranges
CATALOGUE.md quotes from powertrace-sim (read there, not copied) are printed beside them, marked.

With --authority the script also emulates `headroom twin authority`'s concurrency row for the
scenario (its rollout engine, src/twin/rollout.cc, and first-order lag; no noise) under the
shipped and the anchored continuation; the shipped emulation is printed beside what the binary
reports so the emulation can be checked (`headroom twin authority --scenario ... --steps 50
--seeds 20`).

Python 3.11+ standard library only (tomllib). Reads the data by path; nothing is copied in.

Usage: low_occupancy_bands.py [POWER_DATA_DIR] [--scenario TOML] [--model MODEL_ID]
                              [--task TASK] [--authority] [--json]
  POWER_DATA_DIR  default: ../shared/power-data relative to the repository root
  --scenario      default: scenarios/h100-8b-tp1.toml
  --model         the model the calibrated curve is fitted to (default Qwen/Qwen3-8B)
"""
import argparse
import csv
import heapq
import json
import math
import os
import random
import statistics
import sys

try:
    import tomllib
except ImportError:  # Python < 3.11
    sys.exit("low_occupancy_bands: needs Python 3.11+ (tomllib)")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
V3 = os.path.join("mlenergy-v3", "mlenergy_v3_llm_configs.csv")
V2 = os.path.join("mlenergy-v2", "mlenergy_v2_llm_configs.csv")
# shared/power-data/README.md and CATALOGUE.md section 5: whole models held out of fitting.
HELD_OUT_MODELS = {"meta-llama/Llama-3.3-70B-Instruct", "Qwen/Qwen3-30B-A3B-Instruct-2507"}
FIT_TASK = "lm-arena-chat"
BANDS = [(1, 2), (3, 4), (5, 8), (9, 32), (33, math.inf)]
# CATALOGUE.md section 3.3 (powertrace-sim runs, read there but not in shared/power-data).
QUOTED_H100_LOW = ("H100 decode at 1-13 sequences, powertrace-sim (CATALOGUE 3.3, quoted)", 1, 13,
                   300.0, 450.0)
BYTES_PER_PARAM = {"bfloat16": 2.0, "float16": 2.0, "fp8": 1.0}


# ---- the twin's curves, as src/twin/curves.cc computes them ---------------------------------

def logistic(p, x):
    b0, l, x0, k = p
    return b0 + l / (1.0 + math.exp(-k * (x - x0)))


def slope_in_n(p, n):
    b0, l, x0, k = p
    e = math.exp(-k * (math.log2(n) - x0))
    return l * k * e / ((1.0 + e) ** 2) / (n * math.log(2.0))


def below_current(power, tokens, n_min, idle):
    """DecodeCurves::Below(): (t0_s, c_s, e0_j, e1_j) from values and slopes at n_min."""
    tps = max(logistic(tokens, math.log2(n_min)), 1e-12)
    tps_slope = slope_in_n(tokens, n_min)
    t_min = n_min / tps
    c = max(0.0, (tps - n_min * tps_slope) / (tps * tps)) if tps_slope > 0.0 else 0.0
    t0 = t_min - c * n_min
    above = max(0.0, logistic(power, math.log2(n_min)) - idle)
    x_min = above * t_min
    e1 = max(0.0, slope_in_n(power, n_min) * t_min + above * c)
    e0 = x_min - e1 * n_min
    if e0 < 0.0:
        e0, e1 = 0.0, x_min / n_min
    return t0, c, e0, e1


def below_anchored(power, tokens, n_min, idle, weight_bytes, bandwidth, eps):
    """The proposal: t0 = W / B, e0 = eps W, continuous with the curves at n_min. Capped so
    that the step time does not fall and power does not rise as sequences leave (e0 / t0 at
    most the power above idle at n_min)."""
    t_min = n_min / max(logistic(tokens, math.log2(n_min)), 1e-12)
    above = max(0.0, logistic(power, math.log2(n_min)) - idle)
    x_min = above * t_min
    t0 = min(weight_bytes / bandwidth, t_min)
    e0 = min(eps * weight_bytes, above * t0)
    return t0, (t_min - t0) / n_min, e0, (x_min - e0) / n_min


class Curve:
    def __init__(self, name, power, tokens, n_min, idle, below=None, old=False):
        self.name, self.power_p, self.tokens_p, self.n_min, self.idle = (name, power, tokens,
                                                                         n_min, idle)
        self.old = old
        self.m = below if below is not None else below_current(power, tokens, n_min, idle)

    def power(self, n):
        if n <= 0.0:
            return self.idle
        if n >= self.n_min:
            return logistic(self.power_p, math.log2(n))
        if self.old:
            at_min = logistic(self.power_p, math.log2(self.n_min))
            return self.idle + (at_min - self.idle) * math.log2(1 + n) / math.log2(1 + self.n_min)
        t0, c, e0, e1 = self.m

        def stepping(k):
            return self.idle + (e0 + e1 * k) / (t0 + c * k)
        if n >= 1.0:
            return stepping(n)
        at_one = stepping(1.0) if self.n_min > 1.0 else logistic(self.power_p,
                                                                 math.log2(self.n_min))
        return self.idle + (at_one - self.idle) * n / min(1.0, self.n_min)

    def tokens(self, n):
        if n <= 0.0:
            return 0.0
        if n >= self.n_min:
            return logistic(self.tokens_p, math.log2(n))
        if self.old:
            return logistic(self.tokens_p, math.log2(self.n_min)) * n / self.n_min
        t0, c, _, _ = self.m
        return n / (t0 + c * n)


# ---- `twin calibrate`'s fit (src/twin/calibrate.cc), Levenberg-Marquardt ---------------------

def _solve(a, b):
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-300:
            return None
        m[col], m[piv] = m[piv], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                for c in range(col, n + 1):
                    m[r][c] -= f * m[col][c]
    return [m[i][n] / m[i][i] for i in range(n)]


def _lm(x, y, p):
    def resid(q):
        try:
            return [logistic(q, xi) - yi for xi, yi in zip(x, y)]
        except OverflowError:
            return None
    r = resid(p)
    if r is None:
        return None
    cost, lam = sum(v * v for v in r), 1e-3
    for _ in range(4000):
        jac = []
        for xi in x:
            s = 1.0 / (1.0 + math.exp(-p[3] * (xi - p[2])))
            ds = s * (1.0 - s)
            jac.append([1.0, s, -p[1] * ds * p[3], p[1] * ds * (xi - p[2])])
        jtj = [[sum(j[a] * j[b] for j in jac) for b in range(4)] for a in range(4)]
        jtr = [sum(j[a] * ri for j, ri in zip(jac, r)) for a in range(4)]
        improved = False
        while lam < 1e12:
            a = [[jtj[i][k] * (1.0 + lam if i == k else 1.0) for k in range(4)] for i in range(4)]
            d = _solve(a, [-v for v in jtr])
            if d is None:
                lam *= 10.0
                continue
            q = [pi + di for pi, di in zip(p, d)]
            rq = resid(q)
            if rq is not None and all(math.isfinite(v) for v in q):
                cq = sum(v * v for v in rq)
                if cq < cost:
                    step = max(abs(di) / (abs(pi) + 1e-9) for di, pi in zip(d, p))
                    p, r, lam, improved = q, rq, max(lam / 10.0, 1e-12), True
                    done = cost - cq <= 1e-12 * cost or step < 1e-10
                    cost = cq
                    if done:
                        return p
                    break
            lam *= 10.0
        if not improved:
            return p
    return p


def fit_logistic(x, y):
    """Best of the nine starts `twin calibrate` uses (knee at the 25/50/75 % point, k 0.5/1/2)."""
    xs = sorted(x)
    best = None
    for q in (0.25, 0.5, 0.75):
        for k0 in (0.5, 1.0, 2.0):
            p = _lm(x, y, [min(y), max(y) - min(y), xs[int(q * (len(xs) - 1))], k0])
            if p is None:
                continue
            rmse = math.sqrt(statistics.fmean((logistic(p, a) - b) ** 2 for a, b in zip(x, y)))
            if best is None or rmse < best[1]:
                best = (p, rmse)
    return best


# ---- data -----------------------------------------------------------------------------------

def read_v3(path):
    rows = []
    with open(path, newline="") as f:
        for line, r in enumerate(csv.DictReader(f), start=2):
            try:
                gpus, tp = int(r["num_gpus"]), int(r["tensor_parallel"])
                n = float(r["avg_batch_size"])
                rows.append({
                    "task": r["task"], "model": r["model_id"], "arch": r["architecture"],
                    "gpu": r["gpu_model"], "gpus": gpus, "tp": tp,
                    "seqs": int(r["max_num_seqs"]), "n": n,
                    "power_w": float(r["avg_power_per_gpu_w"]),
                    "tps_engine": float(r["output_tok_per_s"]) / (gpus / tp),
                    "params_b": float(r["total_params_b"]), "precision": r["precision"]})
            except (KeyError, ValueError) as e:
                sys.exit(f"low_occupancy_bands: {path}:{line}: {e}")
    return rows


def eight_b_dense_h100(rows):
    return [r for r in rows if r["gpu"] == "H100" and r["arch"] == "Dense Transformer"
            and r["tp"] == 1 and r["gpus"] == 1 and 7.0 <= r["params_b"] <= 9.0]


def intercepts(rows, idle):
    """Per configuration with batches 8, 16, 32: least-squares lines of step time n / TPS and
    step energy above idle (P - idle) n / TPS against n; B = W / t0, eps = e0 / W."""
    groups = {}
    for r in rows:
        if r["gpu"] != "H100" or r["arch"] != "Dense Transformer" or r["gpus"] != r["tp"]:
            continue
        groups.setdefault((r["model"], r["task"], r["tp"]), {})[r["seqs"]] = r
    out = []
    for (model, task, tp), pts in sorted(groups.items()):
        if not all(b in pts for b in (8, 16, 32)):
            continue
        p = [pts[b] for b in (8, 16, 32)]
        ns = [r["n"] for r in p]
        ts = [r["n"] / r["tps_engine"] for r in p]
        xs = [(r["power_w"] - idle) * t for r, t in zip(p, ts)]
        (t0, c), (e0, e1) = _line(ns, ts), _line(ns, xs)
        w = p[0]["params_b"] * 1e9 * BYTES_PER_PARAM.get(p[0]["precision"], 2.0) / tp
        out.append({"model": model, "task": task, "tp": tp, "weight_gb": w / 1e9,
                    "t0_ms": 1e3 * t0, "c_ms": 1e3 * c, "e0_j": e0, "e1_j": e1,
                    "bandwidth_tbps": w / t0 / 1e12, "eps_pj_per_byte": e0 / w * 1e12,
                    "fit": task == FIT_TASK and model not in HELD_OUT_MODELS})
    return out


def batch8_check(rows, idle, icpt):
    """Batch 8 held out: per H100 dense configuration with at least 5 batches from 16 up, the
    logistics are fitted on those alone (as `twin calibrate` fits, n_min = the lowest of them),
    and each continuation predicts batch 8's power and throughput. The anchors leave the
    configuration's own model out."""
    groups = {}
    for r in rows:
        if r["gpu"] == "H100" and r["arch"] == "Dense Transformer" and r["gpus"] == r["tp"]:
            groups.setdefault((r["model"], r["task"], r["tp"]), {})[r["seqs"]] = r
    out = []
    for (model, task, tp), pts in sorted(groups.items()):
        up = [pts[b] for b in sorted(pts) if b >= 16]
        if 8 not in pts or len(up) < 5:
            continue
        x = [math.log2(r["n"]) for r in up]
        pw = fit_logistic(x, [r["power_w"] for r in up])
        tk = fit_logistic(x, [r["tps_engine"] for r in up])
        if pw is None or tk is None:
            continue
        mine = [i for i in icpt if i["fit"] and (i["tp"] == 1) == (tp == 1) and i["model"] != model]
        bandwidth = statistics.median(i["bandwidth_tbps"] for i in mine) * 1e12
        eps = statistics.median(i["eps_pj_per_byte"] for i in mine) * 1e-12
        w = up[0]["params_b"] * 1e9 * BYTES_PER_PARAM.get(up[0]["precision"], 2.0) / tp
        n_min = min(r["n"] for r in up)
        cur = Curve("Below()", pw[0], tk[0], n_min, idle)
        anc = Curve("anchored", pw[0], tk[0], n_min, idle,
                    below_anchored(pw[0], tk[0], n_min, idle, w, bandwidth, eps))
        r8 = pts[8]
        out.append({"model": model, "task": task, "tp": tp, "measured_w": r8["power_w"],
                    "measured_tps": r8["tps_engine"],
                    "power_err_pct": {c.name: 100 * (c.power(r8["n"]) / r8["power_w"] - 1)
                                      for c in (cur, anc)},
                    "tps_err_pct": {c.name: 100 * (c.tokens(r8["n"]) / r8["tps_engine"] - 1)
                                    for c in (cur, anc)}})
    return out


def _line(x, y):
    mx, my = statistics.fmean(x), statistics.fmean(y)
    b = sum((a - mx) * (c - my) for a, c in zip(x, y)) / sum((a - mx) ** 2 for a in x)
    return my - b * mx, b


def band_of(n):
    for lo, hi in BANDS:
        if round(n) >= lo and round(n) <= hi:
            return (lo, hi)
    return BANDS[0]


def band_name(b):
    return f"{b[0]}+" if math.isinf(b[1]) else f"{b[0]}-{b[1]}"


# ---- the rollout engine of src/twin/rollout.cc, for `twin authority`'s concurrency row -------

def rollout_power(curve, sc, concurrency, rollouts, seed):
    r, h, m = sc["rollout"], sc["hardware"], sc["model"]
    dt, prompts, group = 0.1, r["prompts_per_step"], r["group_size"]
    mem = sc["job"].get("tp", 1) * h["memory_gib"] * 2 ** 30 * r.get("gpu_memory_utilization",
                                                                      0.9)
    weights = m["params_b"] * 1e9 * m.get("weight_bytes_per_param", 2.0)
    kv_tok = 2 * m["layers"] * m["kv_heads"] * m["head_dim"] * m.get("kv_bytes_per_value", 2.0)
    kv = int((mem - weights) / kv_tok / (r["prompt_tokens"] + r["max_new_tokens"]))
    dyn = sc["dynamics"]
    a_up = 1 - math.exp(-dt / dyn["tau_up_s"]) if dyn["tau_up_s"] > 0 else 1.0
    a_dn = 1 - math.exp(-dt / dyn["tau_down_s"]) if dyn["tau_down_s"] > 0 else 1.0
    start_w = sc.get("sync", {}).get("power_w", h["idle_loaded_w"])
    rng = random.Random(seed)
    total = ticks = 0
    for _ in range(rollouts):
        lengths = [min(max(round(math.exp(math.log(r["length_median_tokens"])
                                          + r["length_sigma"] * rng.gauss(0.0, 1.0))), 1),
                       r["max_new_tokens"]) for _ in range(prompts * group)]
        nxt, flight, progress, queue = 0, [], 0.0, 0.0
        lagged, limit = start_w, min(concurrency, kv)
        while nxt < len(lengths) or flight:
            while len(flight) < limit and nxt < len(lengths):
                heapq.heappush(flight, progress + lengths[nxt])
                nxt += 1
                queue += r["prompt_tokens"] / group
            n, left, energy = len(flight), dt, 0.0
            if queue > 0:
                used = min(left, queue / r["prefill_tokens_per_s"])
                queue = max(0.0, queue - used * r["prefill_tokens_per_s"])
                energy += used * r["prefill_power_w"]
                left -= used
            if n > 0 and left > 0:
                progress += curve.tokens(n) * left / n
                while flight and flight[0] <= progress:
                    heapq.heappop(flight)
                energy += left * curve.power(n)
                left = 0.0
            energy += left * curve.idle
            target = energy / dt
            lagged += (target - lagged) * (a_up if target > lagged else a_dn)
            total += lagged
            ticks += 1
    return total / ticks


# ---- main -------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="?",
                    default=os.path.join(REPO, "..", "shared", "power-data"))
    ap.add_argument("--scenario", default=os.path.join(REPO, "scenarios", "h100-8b-tp1.toml"))
    ap.add_argument("--model", default="Qwen/Qwen3-8B")
    ap.add_argument("--task", default=FIT_TASK)
    ap.add_argument("--authority", action="store_true",
                    help="emulate the concurrency row of `twin authority` (a few seconds)")
    ap.add_argument("--rollouts", type=int, default=300)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    v3 = os.path.join(a.data, V3)
    if not os.path.exists(v3):
        sys.exit(f"low_occupancy_bands: {v3}: not found (shared/power-data is needed)")
    with open(a.scenario, "rb") as f:
        sc = tomllib.load(f)
    ro, hw, md = sc["rollout"], sc["hardware"], sc["model"]
    idle = float(hw["idle_loaded_w"])
    tp = int(sc["job"].get("tp", 1))
    weight_bytes = md["params_b"] * 1e9 * md.get("weight_bytes_per_param", 2.0) / tp

    def keys(prefix):
        return tuple(float(ro[f"{prefix}_{k}"]) for k in ("b0", "l", "x0", "k"))
    ship_p, ship_t = keys("decode_power"), keys("decode_tokens_per_s")
    ship_nmin = float(ro.get("decode_min_batch", 8.0))

    rows = read_v3(v3)
    fit_rows = [r for r in rows if r["model"] == a.model and r["gpu"] == "H100"
                and r["tp"] == tp and r["task"] == a.task and r["n"] > 0]
    if len(fit_rows) < 5:
        sys.exit(f"low_occupancy_bands: {len(fit_rows)} rows of {a.model} on H100 TP{tp} "
                 f"({a.task}); need 5")
    xs = [math.log2(r["n"]) for r in fit_rows]
    cal_pw, cal_pw_rmse = fit_logistic(xs, [r["power_w"] for r in fit_rows])
    cal_tp, cal_tp_rmse = fit_logistic(xs, [r["tps_engine"] for r in fit_rows])
    cal_nmin = min(r["n"] for r in fit_rows)
    cal_params_b = fit_rows[0]["params_b"]
    cal_weight = cal_params_b * 1e9 * BYTES_PER_PARAM.get(fit_rows[0]["precision"], 2.0) / tp

    # The anchors: median intercepts of the calibration split at this TP degree.
    icpt = intercepts(rows, idle)
    same_tp = [i for i in icpt if i["fit"] and i["tp"] == tp]
    fit_icpt = same_tp if len(same_tp) >= 3 else [i for i in icpt if i["fit"]]
    bandwidth = statistics.median(i["bandwidth_tbps"] for i in fit_icpt) * 1e12
    eps = statistics.median(i["eps_pj_per_byte"] for i in fit_icpt) * 1e-12

    curves = [
        Curve("shipped", ship_p, ship_t, ship_nmin, idle),
        Curve("calibrated", cal_pw, cal_tp, cal_nmin, idle),
        Curve("calibrated, old log2(1+n)", cal_pw, cal_tp, cal_nmin, idle, old=True),
        Curve("shipped, anchored", ship_p, ship_t, ship_nmin, idle,
              below_anchored(ship_p, ship_t, ship_nmin, idle, weight_bytes, bandwidth, eps)),
        Curve("calibrated, anchored", cal_pw, cal_tp, cal_nmin, idle,
              below_anchored(cal_pw, cal_tp, cal_nmin, idle, cal_weight, bandwidth, eps)),
    ]
    grid = [1, 2, 3, 4, 8, 16, 64, 256]

    # Measurements: 8B-class dense, one H100 (v3); the band of each by its realised batch.
    meas = sorted(eight_b_dense_h100(rows), key=lambda r: (r["model"], r["task"], r["n"]))
    v2_rows = []
    v2 = os.path.join(a.data, V2)
    if os.path.exists(v2):
        with open(v2, newline="") as f:
            for r in csv.DictReader(f):
                if float(r["avg_batch_size"]) <= 16.5:
                    v2_rows.append(r)

    result = {"scenario": sc["scenario"]["name"], "idle_loaded_w": idle,
              "calibrated": {"model": a.model, "task": a.task, "power": cal_pw,
                             "power_rmse_w": cal_pw_rmse, "tokens": cal_tp,
                             "tokens_rmse": cal_tp_rmse, "n_min": cal_nmin},
              "anchors": {"bandwidth_tbps": bandwidth / 1e12, "eps_pj_per_byte": eps * 1e12,
                          "configs": len(fit_icpt)},
              "intercepts": icpt,
              "curves": {c.name: {"t0_ms": 1e3 * c.m[0], "c_ms": 1e3 * c.m[1], "e0_j": c.m[2],
                                  "e1_j": c.m[3],
                                  "power_w": {n: c.power(n) for n in grid},
                                  "tokens_per_s": {n: c.tokens(n) for n in grid}}
                         for c in curves}}

    band_rows = []
    for model_task in sorted({(r["model"], r["task"]) for r in meas}):
        pts = [r for r in meas if (r["model"], r["task"]) == model_task]
        for b in BANDS:
            in_band = [r for r in pts if band_of(r["n"]) == b]
            if not in_band:
                continue
            errs = {c.name: statistics.fmean(100 * (c.power(r["n"]) / r["power_w"] - 1)
                                             for r in in_band) for c in curves}
            role = ("fit (calibrated)" if model_task == (a.model, a.task) else
                    "fit (shipped)" if model_task[0] == md["name"] and model_task[1] == FIT_TASK
                    else "held-out task" if model_task[1] != FIT_TASK else "other model")
            band_rows.append({"model": model_task[0], "task": model_task[1], "role": role,
                              "band": band_name(b), "points": len(in_band),
                              "batches": [round(r["n"], 1) for r in in_band],
                              "measured_w": statistics.fmean(r["power_w"] for r in in_band),
                              "err_pct": errs})
    result["bands"] = band_rows
    result["batch8_check"] = batch8_check(rows, idle, icpt)

    if a.authority:
        lo, hi = ro["concurrency_range"]
        auth = {}
        for c in (curves[0], curves[3]):
            p_lo = rollout_power(c, sc, lo, a.rollouts, 1)
            p_hi = rollout_power(c, sc, hi, a.rollouts, 1)
            auth[c.name] = {"low": lo, "high": hi, "low_w": p_lo, "high_w": p_hi,
                            "change_pct": 100 * (p_hi / p_lo - 1)}
        result["authority"] = auth

    if a.json:
        print(json.dumps(result, indent=2, default=str))
        return 0

    names = [c.name for c in curves]
    print(f"## {result['scenario']}: decode curves below and around the lowest measured batch\n")
    print(f"idle-loaded {idle:.0f} W (the scenario's). Calibrated: {a.model}, {a.task}, "
          f"H100 TP{tp} "
          f"(power b0 {cal_pw[0]:.1f}, L {cal_pw[1]:.1f}, x0 {cal_pw[2]:.3f}, k {cal_pw[3]:.3f}; "
          f"RMSE {cal_pw_rmse:.2f} W; n_min {cal_nmin:g}). Anchors from {len(fit_icpt)} "
          f"calibration-split configurations (TP{tp}): B = {bandwidth / 1e12:.2f} TB/s, "
          f"eps = {eps * 1e12:.0f} pJ/B, so P(0+) = idle + eps B = "
          f"{idle + eps * bandwidth:.0f} W.\n")
    print("| curve | t0 ms | c ms/seq | e0 J | e1 J/seq | W/t0 TB/s | "
          + " | ".join(f"P({n})" for n in grid) + " | " + " | ".join(f"TPS({n})" for n in (1, 2, 4))
          + " |")
    print("|---" * (6 + len(grid) + 3) + "|")
    for c in curves:
        w = cal_weight if c.name.startswith("calibrated") else weight_bytes
        mb = ("—", "—", "—", "—", "—") if c.old else (
            f"{1e3 * c.m[0]:.2f}", f"{1e3 * c.m[1]:.3f}", f"{c.m[2]:.2f}", f"{c.m[3]:.3f}",
            f"{w / c.m[0] / 1e12:.2f}")
        print(f"| {c.name} | " + " | ".join(mb) + " | "
              + " | ".join(f"{c.power(n):.0f}" for n in grid) + " | "
              + " | ".join(f"{c.tokens(n):.0f}" for n in (1, 2, 4)) + " |")

    print("\n### Error against public measurements, by band (mean of (curve / measured - 1))\n")
    print("| model | task | role | band | batches | measured W | " + " | ".join(names) + " |")
    print("|---" * (6 + len(names)) + "|")
    for r in band_rows:
        print(f"| {r['model']} | {r['task']} | {r['role']} | {r['band']} | "
              f"{', '.join(f'{b:g}' for b in r['batches'])} | {r['measured_w']:.0f} | "
              + " | ".join(f"{r['err_pct'][n]:+.1f} %" for n in names) + " |")
    label, qlo, qhi, wlo, whi = QUOTED_H100_LOW
    print(f"| {label} | | quoted range | 1-2, 3-4 | {qlo}-{qhi} | {wlo:.0f}-{whi:.0f} | "
          + " | ".join(f"{c.power(1):.0f}-{c.power(4):.0f} W at 1-4" for c in curves) + " |")
    print("\nNo public measurement below batch 8 in shared/power-data: ML.ENERGY v3 starts at 8, "
          "v2 at 16 (A100-SXM4-40GB and vLLM 0.5.4 only; its batch-16 rows are "
          f"{len(v2_rows)} multimodal A100 configurations, "
          + ", ".join(f"{r['model'].split('/')[-1]} TP{r['tp']} "
                      f"{float(r['derived_avg_power_per_gpu_w']):.0f} W"
                      for r in v2_rows if r['tp'] == '1')
          + "; not comparable with an H100 curve).")

    print("\n### Intercepts of ML.ENERGY v3 (batches 8, 16, 32; H100 dense; "
          "W = weight bytes per GPU)\n")
    print("| model | task | TP | split | W GB | t0 ms | B = W/t0 TB/s | e0 J | eps pJ/B | "
          "P(0+) W |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for i in icpt:
        print(f"| {i['model']} | {i['task']} | {i['tp']} | {'fit' if i['fit'] else 'held out'} | "
              f"{i['weight_gb']:.1f} | {i['t0_ms']:.2f} | {i['bandwidth_tbps']:.2f} | "
              f"{i['e0_j']:.2f} | {i['eps_pj_per_byte']:.0f} | "
              f"{idle + i['e0_j'] / (i['t0_ms'] / 1e3):.0f} |")
    held = [i for i in icpt if not i["fit"]]
    if held:
        print(f"\nHeld-out configurations ({len(held)}): B "
              f"{min(i['bandwidth_tbps'] for i in held):.2f}-"
              f"{max(i['bandwidth_tbps'] for i in held):.2f} TB/s (median "
              f"{statistics.median(i['bandwidth_tbps'] for i in held):.2f}), eps "
              f"{min(i['eps_pj_per_byte'] for i in held):.0f}-"
              f"{max(i['eps_pj_per_byte'] for i in held):.0f} pJ/B (median "
              f"{statistics.median(i['eps_pj_per_byte'] for i in held):.0f}).")

    chk = result["batch8_check"]
    if chk:
        print("\n### Batch 8 held out (logistics fitted from batch 16 up, continued to 8)\n")
        print("| model | task | TP | measured W | power: Below() | anchored | "
              "measured tok/s | throughput: Below() | anchored |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in chk:
            print(f"| {r['model']} | {r['task']} | {r['tp']} | {r['measured_w']:.0f} | "
                  f"{r['power_err_pct']['Below()']:+.1f} % | "
                  f"{r['power_err_pct']['anchored']:+.1f} % | "
                  f"{r['measured_tps']:.0f} | {r['tps_err_pct']['Below()']:+.1f} % | "
                  f"{r['tps_err_pct']['anchored']:+.1f} % |")
        for key, what in (("power_err_pct", "power"), ("tps_err_pct", "throughput")):
            print(f"\n{what}: mean |error| Below() "
                  f"{statistics.fmean(abs(r[key]['Below()']) for r in chk):.1f} % (max "
                  f"{max(abs(r[key]['Below()']) for r in chk):.1f} %), anchored "
                  f"{statistics.fmean(abs(r[key]['anchored']) for r in chk):.1f} % (max "
                  f"{max(abs(r[key]['anchored']) for r in chk):.1f} %), {len(chk)} configurations")

    if a.authority:
        print(f"\n### Concurrency authority, emulated ({a.rollouts} rollouts per setting, "
              "no noise)\n")
        print("| continuation | concurrency | rollout W/GPU | power change |")
        print("|---|---|---|---|")
        for name, v in result["authority"].items():
            print(f"| {name} | {v['low']} -> {v['high']} | {v['low_w']:.1f} -> {v['high_w']:.1f} | "
                  f"{v['change_pct']:+.1f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
