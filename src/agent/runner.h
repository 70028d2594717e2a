// The agent's loop: every interval, read the telemetry source, decide, publish, record. The
// clock is injected (a real one in the CLI; none at all with speed 0, for tests and fast runs).
#pragma once

#include <atomic>
#include <functional>
#include <optional>

#include "agent/agent.h"
#include "agent/api.h"
#include "agent/budget.h"
#include "agent/recorder.h"
#include "agent/trainer_link.h"
#include "common/log.h"
#include "telemetry/source.h"

namespace headroom::agent {

struct RunnerOptions {
  double interval_s = 0.5;
  std::optional<double> duration_s;  // agent time; none: until stopped
  // Sees every good sample after the decision, with the budget per GPU in force (the power-limit
  // guard).
  std::function<void(const telemetry::Sample&, double budget_per_gpu_w)> observe;
  // Gets the decision's power limit per GPU (0: none; hybrid actuation) every interval, after
  // observe: where the GPUs' limits are written (--guard-power-limit).
  std::function<void(double power_limit_per_gpu_w)> power_limit;
  // Asked before every decision; a change is handed to the agent, so it takes effect at that
  // decision. Null: the agent's configured budget throughout.
  BudgetSource* budget = nullptr;
  // A monotonic clock in seconds, to measure each decision (read, decide, publish); none: not
  // measured.
  std::function<double()> monotonic_s;
  // The wall clock in Unix seconds, stamped on each decision of the history (the dashboard's
  // axes); none: not stamped.
  std::function<double()> unix_s;
};

// Sleeps until agent time t_s (the clock maps agent time to wall time; speed 0: returns at once).
struct Clock {
  std::function<void(double t_s)> sleep_until;
};

struct RunSummary {
  double duration_s = 0.0;
  uint64_t intervals = 0;
  uint64_t telemetry_errors = 0;
  uint64_t trace_write_errors = 0;  // the recorder's (Recorder::write_errors)
};

// `link`: a trainer in process (the twin), which reports before each decision and has each
// decision applied to it; null when the trainer talks over HTTP. `recorder` may be null.
RunSummary Run(telemetry::Source& source, TrainerLink* link, Shared& shared, Recorder* recorder,
               const RunnerOptions& options, const Clock& clock, const std::atomic<bool>& stop,
               const Logger& log);

}  // namespace headroom::agent
