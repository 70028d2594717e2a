// Hybrid actuation: the hardware power limit as a third actuator, for where steering the workload
// cannot hold the budget — a phase whose own power is above it (a training update, a log-prob
// pass), or a rollout already at its lowest concurrency. docs/CONTROL.md, "Hybrid actuation".
//
// Per phase the assist keeps the limit that phase needed the last time (none until it needed
// one): entering the phase it sets that limit at once, so the phase's first seconds are not an
// excess (feed-forward); within the phase an integral loop on the job's smoothed power per GPU
// holds it at budget x (1 - margin): the limit falls at once by gain x the excess and rises by at
// most rise_w_per_s, and is lifted when it would pass nameplate. Where the workload has
// authority (rollout above the concurrency floor) the limit is lifted (the actuators raise it at
// their own rate, control/actuators.h): there the workload is the cheaper actuator.
//
// Core logic: no clock, no I/O. Not thread-safe; one per controller.
#pragma once

#include <array>

#include "control/controller.h"

namespace headroom::control {

struct LimitAssistRule {
  bool enabled = true;
  double margin = 0.04;        // below the budget: power under a limit still moves by its noise
  double gain = 1.0;           // W of limit per W of excess, per interval
  double rise_w_per_s = 20.0;  // the fastest the limit rises (per GPU)
};

class LimitAssist {
 public:
  // REQUIRES: nameplate_w > min_w > 0.
  LimitAssist(LimitAssistRule rule, double nameplate_w, double min_w);
  void Reset();
  // The limit to set this interval (per GPU; 0: none). `workload_authority`: the workload
  // actuators can still lower the power now.
  double Decide(const Inputs& in, bool workload_authority);
  const LimitAssistRule& rule() const { return rule_; }

 private:
  LimitAssistRule rule_;
  double nameplate_w_;
  double min_w_;
  std::array<double, kPhaseCount> learned_w_{};  // per phase; 0: none needed
  double limit_w_ = 0.0;                         // 0: none
  Phase phase_ = Phase::kIdle;
  bool started_ = false;
};

}  // namespace headroom::control
