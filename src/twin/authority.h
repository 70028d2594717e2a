// `headroom twin authority`: how much each actuator moves mean rollout power per GPU.
//
// For each actuator, the twin runs at the two ends of the actuator's range with the others at
// their defaults (same seeds), and reports the change from the low end to the high end, in %,
// of mean rollout power per GPU, step time and tokens per second. This is the source paper's
// diagnosis as a command: an actuator with little power authority cannot steer power.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "twin/scenario.h"

namespace headroom::twin {

struct AuthorityOptions {
  int steps = 4;  // GRPO steps per run
  std::vector<uint64_t> seeds = {1, 2, 3};
};

struct SettingMeasurement {
  double value = 0.0;
  double rollout_power_w = 0.0;  // mean over rollout ticks and GPUs
  double step_time_s = 0.0;
  double tokens_per_s = 0.0;
  double rollout_tokens_per_s = 0.0;  // tokens made in rollout ticks / rollout time
};

struct ActuatorAuthority {
  std::string name;  // concurrency, group_size, power_limit_w
  SettingMeasurement low, high;
  double rollout_power_change_pct = 0.0;
  double step_time_change_pct = 0.0;
  double tokens_per_s_change_pct = 0.0;
};

struct AuthorityResult {
  std::string scenario;
  std::vector<ActuatorAuthority> actuators;
};

// One run's measurement at the given settings (power_limit_w 0: none).
SettingMeasurement MeasureSetting(const Scenario& scenario, int concurrency, int group_size,
                                  double power_limit_w, const AuthorityOptions& options);

// The rollout's value curve (docs/SITE.md, "Allocation by value"): at `points` concurrencies
// spread geometrically over the scenario's range (group size at its default), mean rollout
// power per GPU and rollout tokens/s, in order of concurrency. REQUIRES: a rollout.
struct RolloutPoint {
  int concurrency = 0;
  double rollout_power_w = 0.0;  // per GPU
  double rollout_tokens_per_s = 0.0;
};
Result<std::vector<RolloutPoint>> RolloutValueCurve(const Scenario& scenario,
                                                    const AuthorityOptions& options,
                                                    int points = 6);

// REQUIRES: the scenario has a rollout. Fails otherwise.
Result<AuthorityResult> MeasureAuthority(const Scenario& scenario, const AuthorityOptions& options);

}  // namespace headroom::twin
