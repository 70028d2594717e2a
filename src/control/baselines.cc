#include "control/baselines.h"

#include <algorithm>
#include <cmath>

namespace headroom::control {

Pid::Pid(PidGains gains, Range concurrency, int start_concurrency, int group_size)
    : gains_(gains), range_(concurrency), start_(start_concurrency), group_size_(group_size) {
  Reset();
}

void Pid::Reset() { integral_ = std::log2(static_cast<double>(range_.Clamp(start_))); }

Command Pid::Decide(const Inputs& in) {
  const double lo = std::log2(static_cast<double>(range_.lo));
  const double hi = std::log2(static_cast<double>(range_.hi));
  const double e = (in.budget_w * (1.0 - gains_.margin) - in.JobPowerW()) / in.budget_w;
  const double unclamped = integral_ + gains_.kp * e;
  if (in.phase == Phase::kRollout) {
    const bool saturated_high = unclamped >= hi && e > 0.0;
    const bool saturated_low = unclamped <= lo && e < 0.0;
    if (!saturated_high && !saturated_low) {
      integral_ = std::clamp(integral_ + gains_.ki * e * in.interval_s, lo, hi);
    }
  }
  const double u = std::clamp(integral_ + gains_.kp * e, lo, hi);
  const int c = range_.Clamp(static_cast<int>(std::lround(std::exp2(u))));
  return {c, group_size_, 0.0};
}

ShieldRule ShieldFor(double window_s, double interval_s, ShieldRule base) {
  base.sustain = std::max(base.sustain, static_cast<int>(std::lround(window_s / 4.0 / interval_s)));
  return base;
}

Shield::Shield(Controller& inner, ShieldRule rule, Range concurrency)
    : inner_(inner), rule_(rule), range_(concurrency), ceiling_(concurrency.hi) {}

void Shield::Reset() {
  inner_.Reset();
  over_ = 0;
  hold_until_s_ = -1.0;
  ceiling_ = range_.hi;
  interventions_ = 0;
}

Command Shield::Decide(const Inputs& in) {
  Command c = inner_.Decide(in);
  if (in.phase != Phase::kRollout) {
    over_ = 0;
    return c;
  }
  over_ = in.JobPowerW() > in.budget_w * (1.0 + rule_.margin) ? over_ + 1 : 0;
  if (over_ >= rule_.sustain) {
    ceiling_ = std::max(range_.lo, static_cast<int>(std::floor(in.concurrency * rule_.cut)));
    hold_until_s_ = in.t_s + rule_.hold_s;
    over_ = 0;
    ++interventions_;
  }
  if (in.t_s < hold_until_s_) {
    const int want = c.concurrency.value_or(in.concurrency);
    c.concurrency = std::min(want, ceiling_);
  }
  return c;
}

}  // namespace headroom::control
