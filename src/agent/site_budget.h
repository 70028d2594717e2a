// The budget a site grants (docs/SITE.md): a BudgetSource over a coord::SiteMember. The
// member speaks whole-job watts (GPUs and node overhead); the agent controls per GPU:
// budget_per_gpu_w = (job_budget_w - node overhead) / GPUs, clamped to the controller's range
// (a PPO policy's trained budgets; the clamp above only lowers what the job acts on, and a
// site floor is never below the range's low end).
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>

#include "agent/budget.h"
#include "coord/member.h"

namespace headroom::agent {

class SiteBudget final : public BudgetSource {
 public:
  // `overhead_w`: the node's other power now. `on_change`: told every change of what the job
  // acts on (the site log). REQUIRES: gpus >= 1, lo_w <= hi_w.
  SiteBudget(coord::SiteMember& member, int gpus, std::function<double()> overhead_w, double lo_w,
             double hi_w,
             std::function<void(const coord::Acting&, double budget_per_gpu_w)> on_change)
      : member_(member),
        gpus_(gpus),
        overhead_w_(std::move(overhead_w)),
        lo_w_(lo_w),
        hi_w_(hi_w),
        on_change_(std::move(on_change)) {}

  BudgetInForce Current(double) override {
    const coord::Acting a = member_.Current();
    double per_gpu_w = (a.job_budget_w - overhead_w_()) / static_cast<double>(gpus_);
    if (!std::isfinite(per_gpu_w)) per_gpu_w = lo_w_;
    per_gpu_w = std::clamp(per_gpu_w, std::max(lo_w_, kMinBudgetPerGpuW),
                           std::min(hi_w_, kMaxBudgetPerGpuW));
    const bool changed = a.state != last_.state || a.job_budget_w != last_.job_budget_w ||
                         a.term != last_.term || a.seq != last_.seq ||
                         a.valid_until_s != last_.valid_until_s;
    if (changed) {
      if (a.state != last_.state || a.job_budget_w != last_.job_budget_w || a.seq != last_.seq) {
        ++version_;
      }
      last_ = a;
      if (on_change_) on_change_(a, per_gpu_w);
    }
    const coord::HoldRequest hold = member_.PendingHold();
    return {per_gpu_w,
            a.reason,
            version_,
            hold.hold_s,
            hold.step,
            /*site=*/true,
            a.hold_until_admitted,
            /*fenced=*/a.state == coord::Acting::State::kFenced};
  }

 private:
  coord::SiteMember& member_;
  const int gpus_;
  std::function<double()> overhead_w_;
  const double lo_w_, hi_w_;
  std::function<void(const coord::Acting&, double)> on_change_;
  coord::Acting last_{coord::Acting::State::kLocal, false, -1.0, -1, -1, 0, -1.0, {}};
  uint64_t version_ = 0;
};

}  // namespace headroom::agent
