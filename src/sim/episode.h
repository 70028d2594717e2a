// Controllers in the twin: the adapter between twin::Environment and control::Controller, and an
// episode scored the way `headroom analyze` scores a trace.
//
// Scoring uses the true power (not the telemetry the controller sees): the job's power (the sum
// over its GPUs, one sample per tick) against budget x GPUs, in tumbling windows of 0.5 s, 30 s
// and 5 min (analysis::WindowStats, the definitions of docs/METRICS.md). Under a budget that
// moves, each decision sees the budget in force at its time, the windows are scored against the
// budget's time-weighted mean over them, and every decrease is timed (settle_s).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "analysis/budget_schedule.h"
#include "control/actuators.h"
#include "control/controller.h"
#include "control/policy.h"
#include "twin/environment.h"
#include "twin/scenario.h"

namespace headroom::sim {

inline constexpr std::array<double, 3> kScoreWindowsS = {0.5, 30.0, 300.0};

control::Inputs ToInputs(const twin::Observation& o, double interval_s);
control::ActuatorLimits LimitsOf(const twin::Scenario& s);
// What a policy trained on `s` over `budget_range_w` carries of it (control/policy.h), its
// admission included.
control::PolicyEnvelope EnvelopeOf(const twin::Scenario& s,
                                   std::pair<double, double> budget_range_w);
control::Applied DefaultsOf(const twin::Scenario& s);
// The job's power per GPU at its lowest actuation (docs/SITE.md, "Floors"): the highest of the
// phases no generation setting lowers (log-probs, training, weight sync, checkpoints) and decode
// at the lowest concurrency. Prefill bursts are left out (a fraction of a second each).
double FloorPerGpuW(const twin::Scenario& s);
// What the job's update draws per GPU at full clocks (coord/reservation.h): the higher of its
// log-prob and training phases' power; 0 for a job without either.
double UpdatePerGpuW(const twin::Scenario& s);

struct EpisodeOptions {
  std::optional<int> steps;         // stop when this many steps are done ...
  std::optional<double> horizon_s;  // ... or at this time, whichever comes first
  bool record_power = false;        // keep the job's mean power per interval (per GPU)
  // A budget that moves (per GPU, in the episode's time); null: `budget_w` throughout.
  const analysis::BudgetSchedule* budget = nullptr;
};

struct EpisodeResult {
  double duration_s = 0.0;
  int steps_done = 0;
  double tokens = 0.0;
  double energy_j = 0.0;
  std::array<double, 3> violation_fraction{};  // per kScoreWindowsS; 0 with no counted window
  std::array<uint64_t, 3> windows{};
  std::vector<float> power_w;   // per interval, mean over the job's GPUs (record_power)
  std::vector<float> budget_w;  // per interval, per GPU (record_power with a moving budget)
  // What the controller did, per interval (record_power): generation concurrency, the group
  // size in force, and the power limit per GPU in force (nameplate when none is set).
  std::vector<float> concurrency, group_size, power_limit_w;
  // Under a moving budget: settle_s of each decrease that settled, and those that did not.
  std::vector<double> settled_s;
  size_t unsettled = 0;
  double mean_concurrency = 0.0;
  double mean_group_size = 0.0;
  // The hardware power limit (docs/METRICS.md, "Power-limit use"): the share of control
  // intervals with a limit below nameplate in force, and over those the mean of
  // (nameplate - limit) / nameplate.
  double limit_fraction = 0.0;
  double limit_depth = 0.0;
  double tokens_per_mwh() const { return energy_j > 0.0 ? tokens / (energy_j / 3.6e9) : 0.0; }
};

// REQUIRES: options set steps or horizon_s.
EpisodeResult RunEpisode(const twin::Scenario& scenario, double budget_w, uint64_t seed,
                         control::Controller& controller, const EpisodeOptions& options);

}  // namespace headroom::sim
