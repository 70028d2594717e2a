// The twin as an environment for controllers: what a live agent would see and do.
//
// Every control interval (default 0.5 s) the controller gets an Observation — only what a real
// agent can know: smoothed (NVML-like) power per GPU, the phase, step and actuation in force,
// tokens so far — and returns an Actuation. The interval's metrics carry the true power, which
// violations are scored on. Deterministic for a seed.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "twin/twin.h"

namespace headroom::twin {

struct Actuation {
  std::optional<int> concurrency;       // applied from the next tick
  std::optional<int> group_size;        // applied at the next step boundary
  std::optional<double> power_limit_w;  // 0: no limit
};

struct Observation {
  double t_s = 0.0;
  std::vector<double> smoothed_power_w;  // per GPU
  Phase phase = Phase::kStartup;
  int step = 0;                   // steps completed
  double rollout_progress = 0.0;  // finished / all sequences of this step's rollout
  int concurrency = 0;            // in force
  int group_size = 0;             // in force this step
  int next_group_size = 0;        // for the next step
  double power_limit_w = 0.0;     // 0: none
  double tokens_total = 0.0;
  double budget_w = 0.0;  // per GPU
};

struct IntervalMetrics {
  std::vector<double> tick_power_w;  // true power, tick-major: ticks x GPUs
  std::vector<double> mean_power_w;  // true power per GPU, mean over the interval
  double tokens = 0.0;
  double energy_j = 0.0;
  Phase phase = Phase::kStartup;  // the phase at the end of the interval
};

class Environment {
 public:
  // REQUIRES: budget_w > 0 (per GPU).
  Environment(Scenario scenario, double budget_w);

  Observation Reset(uint64_t seed);

  struct StepResult {
    Observation observation;
    IntervalMetrics metrics;
  };
  // Applies the actuation (clamped; see Twin) and advances one control interval.
  // REQUIRES: Reset was called.
  StepResult Step(const Actuation& actuation);

  const Scenario& scenario() const { return scenario_; }
  const Twin& twin() const { return *twin_; }
  int ticks_per_interval() const { return ticks_per_interval_; }

 private:
  Observation Observe() const;

  Scenario scenario_;
  double budget_w_;
  int ticks_per_interval_;
  std::optional<Twin> twin_;
};

}  // namespace headroom::twin
