// A small, fully specified scenario for tests: every number chosen so that answers can be
// computed by hand.
#pragma once

#include <string>

namespace headroom::twin::testing {

// One GPU; decode power 100 + 100 / (1 + exp(-(log2 n - 3))) W (200 W plateau, 150 W at n = 8),
// throughput 10 n tok/s per engine (linear: b0 0, a logistic that is ~linear is not needed:
// n_min = 1 and a steep logistic are avoided by tests that only use fixed phases).
inline std::string TinyScenario(const std::string& overrides = "") {
  return R"([scenario]
name = "tiny"
[job]
gpus = 1
tp = 1
[hardware]
gpu_model = "test"
nameplate_w = 400
memory_gib = 80
idle_w = 50
idle_loaded_w = 80
[model]
name = "tiny"
params_b = 1
layers = 4
kv_heads = 4
head_dim = 64
[rollout]
prompts_per_step = 2
group_size = 4
concurrency = 8
group_size_range = [1, 16]
concurrency_range = [1, 64]
prompt_tokens = 100
max_new_tokens = 1000
length_median_tokens = 100
length_sigma = 0.5
prefill_tokens_per_s = 1000
prefill_power_w = 390
decode_power_b0 = 100
decode_power_l = 100
decode_power_x0 = 3
decode_power_k = 1
decode_tokens_per_s_b0 = 0
decode_tokens_per_s_l = 1600
decode_tokens_per_s_x0 = 3
decode_tokens_per_s_k = 1
decode_min_batch = 8
[logprob]
passes = 1
tokens_per_s = 1000
power_w = 300
[train]
tokens_per_s = 500
power_w = 350
[sync]
duration_s = 1.0
power_w = 120
[dynamics]
tau_up_s = 0
tau_down_s = 0
noise_w = 0
noise_rho = 0
[telemetry]
average_s = 1.0
[power_limit]
power_fraction = [1.0, 0.5]
time_factor = [1.0, 2.0]
min_w = 100
[budget]
default_w = 300
)" + overrides;
}

}  // namespace headroom::twin::testing
