#include "control/features.h"

#include <algorithm>
#include <cmath>

namespace headroom::control {

const std::array<std::string_view, kFeatureCount> kFeatureNames = {
    "headroom_0",      "headroom_1",   "headroom_2",       "headroom_3",    "headroom_4",
    "trend",           "phase_idle",   "phase_startup",    "phase_rollout", "phase_logprob",
    "phase_train",     "phase_sync",   "phase_checkpoint", "phase_stopped", "progress",
    "concurrency",     "group_size",   "next_group_size",  "budget",        "power_limit",
    "update_headroom", "rollout_slope"};
static_assert(kPhaseCount == 8, "kFeatureNames lists one phase_* per phase");

int ConcurrencyAtLevel(const Range& range, int level, int levels) {
  if (levels <= 1 || range.hi <= range.lo) return range.lo;
  const double lo = std::log2(static_cast<double>(range.lo));
  const double hi = std::log2(static_cast<double>(range.hi));
  const double f = static_cast<double>(level) / (levels - 1);
  return range.Clamp(static_cast<int>(std::lround(std::exp2(lo + f * (hi - lo)))));
}

int NearestConcurrencyLevel(const Range& range, int c, int levels) {
  int best = 0;
  double best_d = 1e300;
  const double target = std::log2(static_cast<double>(std::max(c, 1)));
  for (int i = 0; i < levels; ++i) {
    const double d =
        std::abs(std::log2(static_cast<double>(ConcurrencyAtLevel(range, i, levels))) - target);
    if (d < best_d - 1e-12) {
      best_d = d;
      best = i;
    }
  }
  return best;
}

int GroupAtLevel(const Range& range, int level, int levels) {
  if (levels <= 1 || range.hi <= range.lo) return range.lo;
  const double f = static_cast<double>(level) / (levels - 1);
  return range.Clamp(static_cast<int>(std::lround(range.lo + f * (range.hi - range.lo))));
}

namespace {

double LogPosition(const Range& r, int v) {
  if (r.hi <= r.lo) return 0.0;
  const double lo = std::log2(static_cast<double>(r.lo));
  const double hi = std::log2(static_cast<double>(r.hi));
  return std::clamp((std::log2(static_cast<double>(std::max(v, 1))) - lo) / (hi - lo), 0.0, 1.0);
}

double LinearPosition(const Range& r, int v) {
  if (r.hi <= r.lo) return 0.0;
  return std::clamp(static_cast<double>(v - r.lo) / (r.hi - r.lo), 0.0, 1.0);
}

}  // namespace

void FeatureState::Reset() {
  filled_ = 0;
  update_sum_w_ = 0.0;
  update_n_ = 0;
  last_update_w_ = 0.0;
  s_ = sx_ = sy_ = sxx_ = sxy_ = 0.0;
}

void FeatureState::Compute(const Inputs& in, const ActuatorLimits& limits, double* out) {
  constexpr double kForget = 0.98;     // per rollout interval: ~50 intervals of memory
  constexpr double kMinSpread = 0.05;  // log2 units squared: below it the slope is unknown
  const double headroom = in.JobPowerW() / in.budget_w - 1.0;
  if (filled_ == 0) history_.fill(headroom);
  for (int i = kHistory - 1; i > 0; --i) history_[i] = history_[i - 1];
  history_[0] = headroom;
  filled_ = std::min(filled_ + 1, kHistory);
  int k = 0;
  for (int i = 0; i < kHistory; ++i) out[k++] = history_[i];
  out[k++] = history_[0] - history_[1];
  for (int p = 0; p < kPhaseCount; ++p) out[k++] = static_cast<int>(in.phase) == p ? 1.0 : 0.0;
  out[k++] = in.rollout_progress;
  out[k++] = LogPosition(limits.concurrency, in.concurrency);
  out[k++] = LinearPosition(limits.group_size, in.group_size);
  out[k++] = LinearPosition(limits.group_size, in.next_group_size);
  out[k++] = limits.nameplate_w > 0.0 ? in.budget_w / limits.nameplate_w : 0.0;

  const double job_w = in.JobPowerW();
  out[k++] = in.power_limit_w > 0.0 && limits.nameplate_w > 0.0
                 ? std::min(1.0, in.power_limit_w / limits.nameplate_w)
                 : 1.0;
  const bool updating = in.phase == Phase::kLogprob || in.phase == Phase::kTrain;
  if (updating) {
    update_sum_w_ += job_w;
    ++update_n_;
  } else if (update_n_ > 0) {
    last_update_w_ = update_sum_w_ / update_n_;
    update_sum_w_ = 0.0;
    update_n_ = 0;
  }
  const double update_w = update_n_ > 0 ? update_sum_w_ / update_n_ : last_update_w_;
  out[k++] = update_w > 0.0 ? update_w / in.budget_w - 1.0 : 0.0;
  if (in.phase == Phase::kRollout && in.concurrency > 0) {
    const double x = std::log2(static_cast<double>(in.concurrency));
    const double y = job_w / in.budget_w;
    s_ = kForget * s_ + 1.0;
    sx_ = kForget * sx_ + x;
    sy_ = kForget * sy_ + y;
    sxx_ = kForget * sxx_ + x * x;
    sxy_ = kForget * sxy_ + x * y;
  }
  const double var = s_ > 0.0 ? sxx_ / s_ - (sx_ / s_) * (sx_ / s_) : 0.0;
  const double cov = s_ > 0.0 ? sxy_ / s_ - (sx_ / s_) * (sy_ / s_) : 0.0;
  out[k++] = var > kMinSpread ? std::clamp(cov / var, -1.0, 1.0) : 0.0;
}

}  // namespace headroom::control
