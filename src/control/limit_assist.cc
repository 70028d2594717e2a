#include "control/limit_assist.h"

#include <algorithm>
#include <cassert>

namespace headroom::control {

LimitAssist::LimitAssist(LimitAssistRule rule, double nameplate_w, double min_w)
    : rule_(rule), nameplate_w_(nameplate_w), min_w_(min_w) {
  assert(nameplate_w > min_w && min_w > 0.0);
}

void LimitAssist::Reset() {
  learned_w_.fill(0.0);
  limit_w_ = 0.0;
  phase_ = Phase::kIdle;
  started_ = false;
}

double LimitAssist::Decide(const Inputs& in, bool workload_authority) {
  if (!rule_.enabled || in.budget_w <= 0.0) return 0.0;
  const size_t p = static_cast<size_t>(in.phase);
  if (workload_authority) {
    // Lifted (the actuators raise it at their rate): the workload is the cheaper actuator here.
    limit_w_ = 0.0;
    phase_ = in.phase;
    started_ = true;
    return limit_w_;
  }
  if (!started_ || in.phase != phase_) {
    // Entering a phase: what it needed last time, at once. The power read now is still the last
    // phase's (smoothed), so the loop waits for the next interval.
    limit_w_ = learned_w_[p];
    phase_ = in.phase;
    started_ = true;
    if (limit_w_ > 0.0) return limit_w_;
  }
  const double rise_w = rule_.rise_w_per_s * in.interval_s;
  const double target_w = in.budget_w * (1.0 - rule_.margin);
  const double excess_w = in.JobPowerW() - target_w;
  if (limit_w_ <= 0.0) {
    // None yet: the first excess sets it a margin below the budget, less what is over.
    if (excess_w > 0.0) limit_w_ = std::max(min_w_, target_w - rule_.gain * excess_w);
  } else {
    const double step_w = std::min(-rule_.gain * excess_w, rise_w);  // falls at once, rises slowly
    limit_w_ = std::max(min_w_, limit_w_ + step_w);
    if (limit_w_ >= nameplate_w_) limit_w_ = 0.0;
  }
  learned_w_[p] = limit_w_;
  return limit_w_;
}

}  // namespace headroom::control
