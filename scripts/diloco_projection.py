#!/usr/bin/env python3
"""Energy to a target loss projected for a 1B model on H100s across sites (docs/DILOCO.md,
"Energy to a target loss"), from a DDP run and a DiLoCo run of `headroom diloco local` measured
here: the tokens DiLoCo needed to reach DDP's final loss, as a multiple of DDP's, carried over to
the 1B model (an assumption: the ratio is the CPU-scale model's), DDP training 20 tokens per
parameter. Every input is printed.

Per worker (one H100 per site), nothing overlapped, as the worker runs:
  step        = 6 N x tokens per step / (MFU x peak)              compute seconds per inner step
  DDP         each step: ring all-reduce of fp32 gradients, 2 (k - 1) (4N / k / B + RTT / 2) s,
              2 (k - 1) / k x 4N bytes sent
  DiLoCo      each round of H steps: ring all-gather of int8 frames, (k - 1) (N / B + RTT / 2) s
              + 9 RTT (etcd and Gloo's rendezvous), (k - 1) N bytes sent
  energy      compute = compute s x training W; idle = exchange s x waiting W;
              network = bytes x J/byte (host CPUs are not modelled)

Usage: diloco_projection.py DDP_SUMMARY_JSON DILOCO_SUMMARY_JSON
"""
import json
import sys

# The inputs, each with its source.
PARAMS = 1e9                 # a 1B model
DDP_TOKENS = 20 * PARAMS     # DDP trains 20 tokens per parameter (Hoffmann et al. 2022)
WORKERS = 4                  # sites, one H100 each
TOKENS_PER_STEP = 0.5e6      # per worker (scripts/diloco_results.py's projection)
MFU = 0.40
PEAK_FLOPS = 989e12          # H100 SXM, dense BF16 (NVIDIA's datasheet)
TRAIN_W = 553.4              # scenarios/h100-8b-ddp-train.toml: mean of measured training segments
WAIT_W = 117.0               # ... idle_loaded_w: a GPU holding its model, not computing
WAN_BYTES_PER_S = 1e9 / 8    # 1 Gbit/s between sites
RTT_S = 0.050
J_PER_BYTE = 21.8e-9 * 8.0   # between datacentres, 2024 equipment (arXiv 2504.14022)


def project(ddp_tokens, ratio, h):
    """Energy (J, summed over workers) to the target for DDP and DiLoCo: compute, idle, network."""
    k, n = WORKERS, PARAMS
    step_s = 6 * n * TOKENS_PER_STEP / (MFU * PEAK_FLOPS)
    steps = ddp_tokens / (k * TOKENS_PER_STEP)
    ddp_wait = 2 * (k - 1) * (4 * n / k / WAN_BYTES_PER_S + RTT_S / 2)
    ddp_bytes = 2 * (k - 1) / k * 4 * n
    ddp = {"compute": k * steps * step_s * TRAIN_W, "idle": k * steps * ddp_wait * WAIT_W,
           "network": k * steps * ddp_bytes * J_PER_BYTE}
    rounds = steps * ratio / h
    dl_wait = (k - 1) * (n / WAN_BYTES_PER_S + RTT_S / 2) + 9 * RTT_S
    dl = {"compute": k * rounds * h * step_s * TRAIN_W, "idle": k * rounds * dl_wait * WAIT_W,
          "network": k * rounds * (k - 1) * n * J_PER_BYTE}
    return ddp, dl


def share(e):
    total = sum(e.values())
    return total, 100 * (total - e["compute"]) / total


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    with open(argv[1]) as f:
        ddp = json.load(f)
    with open(argv[2]) as f:
        dl = json.load(f)
    t = dl.get("to_target")
    if t is None:
        sys.exit(f"diloco_projection: {argv[2]}: field 'to_target': missing (run with --target-loss)")
    if not t["reached"]:
        print("   projected for a 1B model on H100s: not projected (DiLoCo did not reach DDP's loss "
              "here, so its tokens to it are not known)")
        return 0
    ratio = t["tokens"] / ddp["tokens"]
    h = dl["inner_steps"]
    ddp_e, dl_e = project(DDP_TOKENS, ratio, h)
    ddp_total, ddp_share = share(ddp_e)
    dl_total, dl_share = share(dl_e)
    print(f"   projected for a 1B model on {WORKERS} H100s at {WORKERS} sites: DDP "
          f"{ddp_total / 3.6e6:,.1f} kWh (coordination {ddp_share:.1f} %), DiLoCo H = {h} "
          f"{dl_total / 3.6e6:,.1f} kWh (coordination {dl_share:.1f} %)")
    print(f"     inputs: DDP {DDP_TOKENS:.3g} tokens (20 per parameter); DiLoCo's tokens to DDP's "
          f"loss x {ratio:.2f} (measured here: an assumption at 1B); {TOKENS_PER_STEP:,.0f} "
          f"tokens/step/GPU at {100 * MFU:.0f} % MFU of {PEAK_FLOPS:.3g} FLOP/s; {TRAIN_W} W "
          f"training, {WAIT_W} W waiting (measured H100 traces, scenarios/h100-8b-ddp-train.toml); "
          f"{WAN_BYTES_PER_S * 8 / 1e9:g} Gbit/s, {1000 * RTT_S:.0f} ms RTT; {J_PER_BYTE:.3g} "
          "J/byte; fp32 all-reduce every step (DDP), int8 all-gather every H steps (DiLoCo)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
