// The controller interface shared by the twin and the live agent.
//
// Every control interval (default 0.5 s) a controller receives Inputs — only what a real agent
// beside a trainer can know: smoothed (NVML-like) power per GPU, the budget, the actuation in
// force, and the phase, step and rollout progress the trainer reports — and returns a Command.
// Actuators (actuators.h) clamp and rate-limit the command and report what they applied.
//
// Core logic only: no I/O, no clock, no dependency on the twin. Controllers are stateful (they
// keep their own history) and are not thread-safe; one per episode or per agent.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/phase.h"

namespace headroom::control {

// The phase the trainer reports.
// The job's phases: one vocabulary with the twin and the agent's API (common/phase.h).
using headroom::kPhaseCount;
using headroom::kPhaseNames;
using headroom::Phase;
using headroom::PhaseFromName;
using headroom::PhaseName;

struct Range {
  int lo = 1;
  int hi = 1;
  int Clamp(int v) const { return v < lo ? lo : (v > hi ? hi : v); }
};

struct Inputs {
  double t_s = 0.0;
  double interval_s = 0.5;
  double budget_w = 0.0;                     // per GPU
  std::span<const double> smoothed_power_w;  // per GPU, telemetry view (not the true power)
  Phase phase = Phase::kIdle;
  int step = 0;                   // steps completed
  double rollout_progress = 0.0;  // finished / all sequences of this step's rollout
  int concurrency = 0;            // in force
  int group_size = 0;             // in force this step
  int next_group_size = 0;        // for the next step
  double power_limit_w = 0.0;     // 0: none
  double tokens_total = 0.0;

  // The job's smoothed power per GPU: the mean over its GPUs (0 with none). Budgets hold for the
  // job (its sum against budget x GPUs), so this is what every controller compares with the
  // budget; the largest GPU alone would see the noise of one and cut for nothing.
  double JobPowerW() const;
};

struct Command {
  std::optional<int> concurrency;       // now
  std::optional<int> group_size;        // at the next step boundary
  std::optional<double> power_limit_w;  // 0: no limit
};

class Controller {
 public:
  virtual ~Controller() = default;
  virtual std::string_view name() const = 0;
  // Forget history: a new episode or a new job.
  virtual void Reset() {}
  virtual Command Decide(const Inputs& in) = 0;
};

}  // namespace headroom::control
