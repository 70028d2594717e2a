// A twin scenario: one training job on one kind of GPU, every parameter with its source.
//
// Scenarios are TOML files (scenarios/*.toml, embedded in the binary as built-ins); see
// docs/TWIN.md for the keys. Loading validates everything: a missing or out-of-range key, an
// unknown key, or inconsistent values fail with the file, the key and the reason.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "twin/curves.h"
#include "twin/rollout.h"

namespace headroom::twin {

struct IntRange {
  int lo = 0;
  int hi = 0;
};

struct Scenario {
  std::string name;
  std::string description;
  std::string source;  // file or "built-in"

  // [job]
  int gpus = 1;
  int tp = 1;                       // tensor-parallel degree of a rollout engine
  double idle_before_s = 0.0;       // no process on the GPUs yet (idle_w)
  double startup_s = 0.0;           // then the model loads (idle_loaded_w) before the first step
  std::optional<double> stop_at_s;  // the job ends (GPUs fall to idle_w) at this time

  // [hardware]
  std::string gpu_model;
  double nameplate_w = 0.0;    // per GPU
  double memory_gib = 0.0;     // per GPU
  double idle_w = 0.0;         // no process on the GPU
  double idle_loaded_w = 0.0;  // model loaded, nothing running

  // [model]
  std::string model;
  double params_b = 0.0;
  int layers = 0;
  int kv_heads = 0;
  int head_dim = 0;
  double weight_bytes_per_param = 2.0;
  double kv_bytes_per_value = 2.0;

  // [rollout] (absent: a training-only job)
  bool has_rollout = false;
  int prompts_per_step = 0;
  int group_size = 0;   // the trainer's default
  int concurrency = 0;  // the engine's default limit (vLLM max_num_seqs)
  // How the trainer admits sequences (rollout.admission, optional): continuous, as vLLM's
  // scheduler, or chunked, a chunk of `concurrency` waiting for its longest (twin/rollout.h).
  Admission admission = Admission::kContinuous;
  IntRange group_size_range;
  IntRange concurrency_range;
  double prompt_tokens = 0.0;
  double max_new_tokens = 0.0;
  double length_median_tokens = 0.0;  // completion lengths: lognormal, capped
  double length_sigma = 0.0;
  double gpu_memory_utilization = 0.9;
  double prefill_tokens_per_s = 0.0;  // per engine
  double prefill_power_w = 0.0;       // per GPU
  DecodeCurves decode;

  // [logprob]
  int logprob_passes = 0;
  double logprob_tokens_per_s = 0.0;  // per GPU, one pass
  double logprob_power_w = 0.0;

  // [train]
  bool has_train = true;            // false: a generation-only job (no [train])
  double train_tokens_per_s = 0.0;  // per GPU, forward + backward
  double train_power_w = 0.0;
  double train_tokens_per_step = 0.0;  // training-only jobs: tokens per GPU per step

  // [sync]
  double sync_s = 0.0;
  double sync_power_w = 0.0;

  // [checkpoint]
  int checkpoint_every_steps = 0;  // 0: never
  double checkpoint_s = 0.0;
  double checkpoint_power_w = 0.0;
  // Slow storage: from a random time after the first step (exponential, this mean; 0: never)
  // every checkpoint that begins lasts checkpoint_slow_s instead of checkpoint_s.
  double checkpoint_slow_onset_mean_s = 0.0;
  double checkpoint_slow_s = 0.0;

  // [dynamics]
  double tau_up_s = 0.5;
  double tau_down_s = 0.25;
  double noise_w = 0.0;    // stationary standard deviation
  double noise_rho = 0.0;  // AR(1) coefficient per tick

  // [telemetry]
  double telemetry_average_s = 1.0;

  // [power_limit]
  ClockCurve clock;
  double power_limit_min_w = 0.0;

  // [control]
  double tick_s = 0.1;
  double interval_s = 0.5;

  // [budget]
  double budget_w = 0.0;                     // per GPU, the scenario's default
  std::pair<double, double> budget_range_w;  // per GPU: controllers are trained and run in it

  int engines() const { return gpus / tp; }
};

// Bytes of KV cache per token of context, per engine (all its GPUs).
double KvBytesPerToken(const Scenario& s);
// How many sequences of prompt + max_new_tokens fit in one engine's KV cache.
int KvCapacitySequences(const Scenario& s);

// Parses scenario TOML. `source_name` names the text in messages.
Result<Scenario> ParseScenario(std::string_view toml_text, std::string_view source_name);

// The scenario as TOML that ParseScenario reads back to the same values (numbers in their
// shortest exact form), every table and key it sets; `header` lines go first as comments.
std::string ScenarioToToml(const Scenario& s, const std::vector<std::string>& header = {});

// A built-in scenario by name, or a TOML file by path.
Result<Scenario> LoadScenario(std::string_view name_or_path);

// The names of the built-in scenarios, and their TOML text.
std::vector<std::string> BuiltinScenarioNames();
std::optional<std::string_view> BuiltinScenarioText(std::string_view name);

}  // namespace headroom::twin
