// A synthetic GRPO-like training trace for demos, benchmarks and tests of scale.
//
// NOT a model of any machine: the digital twin is. It has the shape of RL post-training power
// (a rollout whose occupancy and power fall through a straggler tail, a near-TDP update phase
// with micro-batch ripple, a weight-sync dip) so that every statistic of `headroom analyze` has
// something to find. Deterministic for a seed.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace headroom::trace {

struct SyntheticSpec {
  uint32_t gpus = 8;
  double duration_s = 1800.0;
  double interval_s = 0.1;
  double nameplate_w = 400.0;  // A100 SXM TDP
  uint64_t seed = 1;
};

struct SyntheticSample {
  double t_s;
  uint32_t gpu;
  double power_w;
  std::string_view phase;  // "rollout", "train" or "sync"
  double step;
  double tokens;  // produced since this GPU's previous sample
};

// Calls `emit` for every sample, in time order, GPUs of one tick in GPU order.
void GenerateSyntheticTrace(const SyntheticSpec& spec,
                            const std::function<void(const SyntheticSample&)>& emit);

}  // namespace headroom::trace
