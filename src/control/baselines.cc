#include "control/baselines.h"

#include <algorithm>
#include <cmath>

namespace headroom::control {

Pid::Pid(PidGains gains, Range concurrency, int start_concurrency, int group_size,
         double nameplate_w, double limit_min_w)
    : gains_(gains), range_(concurrency), start_(start_concurrency), group_size_(group_size) {
  if (gains_.assist.enabled && limit_min_w > 0.0 && nameplate_w > limit_min_w) {
    assist_.emplace(gains_.assist, nameplate_w, limit_min_w);
  }
  Reset();
}

void Pid::Reset() {
  integral_ = std::log2(static_cast<double>(range_.Clamp(start_)));
  if (assist_) assist_->Reset();
}

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
  const bool authority = in.phase == Phase::kRollout && in.concurrency > range_.lo;
  return {c, group_size_, assist_ ? assist_->Decide(in, authority) : 0.0};
}

ShieldRule ShieldFor(double window_s, double interval_s, ShieldRule base) {
  base.sustain = std::max(base.sustain, static_cast<int>(std::lround(window_s / 4.0 / interval_s)));
  return base;
}

Shield::Shield(Controller& inner, ShieldRule rule, Range concurrency)
    : inner_(inner), rule_(rule), range_(concurrency), ceiling_(concurrency.hi) {}

void Shield::Reset() {
  inner_.Reset();
  excess_.Reset();
  hold_until_s_ = -1.0;
  ceiling_ = range_.hi;
  interventions_ = 0;
  last_budget_w_ = 0.0;
  rollout_c_sum_ = 0.0;
  rollout_budget_sum_w_ = 0.0;
  rollout_decisions_ = 0;
  admit_c_ = 0.0;
  admit_budget_w_ = 0.0;
  cap_until_s_ = -1.0;
  settle_until_s_ = -1.0;
  capped_ = false;
}

Command Shield::Decide(const Inputs& raw) {
  const bool decreased = last_budget_w_ > 0.0 && raw.budget_w < last_budget_w_;
  last_budget_w_ = raw.budget_w;
  if (decreased) settle_until_s_ = raw.t_s + rule_.settle_s;
  // While settling after a decrease, the inner controller and the limit aim a margin below the
  // new budget, and any excess over it counts: the power is to come down and stay down.
  const bool settling = raw.t_s < settle_until_s_;
  Inputs in = raw;
  if (settling) in.budget_w = raw.budget_w * (1.0 - rule_.margin);
  Command c = inner_.Decide(in);
  const double job_w = in.JobPowerW();
  const bool over_now = job_w > raw.budget_w;
  const auto cap = [&] {
    cap_until_s_ = in.t_s + rule_.decrease_cap_s;
    cap_phase_ = in.phase;
  };
  if (decreased && over_now) cap();
  if (cap_until_s_ >= 0.0 && (in.t_s >= cap_until_s_ || in.phase != cap_phase_)) {
    cap_until_s_ = -1.0;
  }
  const auto limit = [&] {
    // A margin under the budget: power under a limit still moves by its noise.
    c.power_limit_w = in.budget_w * (1.0 - rule_.margin);  // follows the budget in force
    capped_ = true;
  };
  if (cap_until_s_ >= 0.0) {
    limit();
  } else if (capped_) {
    if (!c.power_limit_w) c.power_limit_w = 0.0;  // lifted (a limit of the inner one stays)
    capped_ = false;
  }
  if (in.phase != Phase::kRollout) {
    excess_.Reset();
    if (rollout_decisions_ > 0) {  // a rollout ended: what the next one may admit at once
      admit_c_ = rollout_c_sum_ / rollout_decisions_;
      admit_budget_w_ = rollout_budget_sum_w_ / rollout_decisions_;
      rollout_c_sum_ = rollout_budget_sum_w_ = 0.0;
      rollout_decisions_ = 0;
    }
    // The next rollout admits this concurrency at once, and work admitted cannot be called
    // back: at most the last rollout's mean, scaled by the budget since.
    if (admit_c_ > 0.0 && rule_.bound_admission) {
      const int bound = std::max(
          range_.lo, static_cast<int>(std::floor(admit_c_ * raw.budget_w / admit_budget_w_)));
      c.concurrency = std::min(c.concurrency.value_or(in.concurrency), bound);
    }
    return c;
  }
  rollout_c_sum_ += in.concurrency;
  rollout_budget_sum_w_ += raw.budget_w;
  ++rollout_decisions_;
  // The shared rule (control/over_budget.h); while settling, no margin and no sustain.
  const bool sustained = excess_.Observe(
      job_w, raw.budget_w, settling ? ExcessRule{0.0, 1} : ExcessRule{rule_.margin, rule_.sustain});
  // A sustained excess while settling after a decrease: concurrency is cut, and because the cut
  // only stops admissions while the work already admitted keeps the power up, the power limit
  // backs it until the phase ends. (Outside a settle the cut alone: a limit there would let a
  // policy ride it — in training one did, at 3 % violations with the multiplier at its cap.)
  if (sustained && settling && cap_until_s_ < 0.0) {
    cap();
    limit();
  }
  if ((decreased && over_now) || sustained) {
    ceiling_ = std::max(range_.lo, static_cast<int>(std::floor(in.concurrency * rule_.cut)));
    hold_until_s_ = in.t_s + rule_.hold_s;
    excess_.Reset();
    ++interventions_;
  }
  if (in.t_s < hold_until_s_) {
    const int want = c.concurrency.value_or(in.concurrency);
    c.concurrency = std::min(want, ceiling_);
  }
  return c;
}

}  // namespace headroom::control
