#include "slurm/suspender.h"

#include <algorithm>

namespace headroom::slurm {
namespace {
constexpr double kEpsW = 1e-6;
}

std::vector<SuspendAction> Suspender::Decide(const coord::CoordinatorStatus& status, double now_s) {
  std::vector<SuspendAction> out;
  if (status.role != "leader" || !status.ledger) return out;
  const coord::Ledger& ledger = *status.ledger;
  // Suspensions: registered Slurm-run opportunistic members at 0, acknowledged, long enough.
  for (auto it = zero_since_.begin(); it != zero_since_.end();) {
    it = status.members.contains(it->first) ? std::next(it) : zero_since_.erase(it);
  }
  double wanted_w = 0.0;  // by registered opportunistic members not suspended
  for (const auto& [name, m] : status.members) {
    if (m.job_class != coord::JobClass::kOpportunistic || suspended_.contains(name)) continue;
    wanted_w += m.demand_w;
    if (m.slurm_job.empty()) continue;
    const auto j = ledger.jobs.find(name);
    if (j == ledger.jobs.end() || j->second.lease != m.lease || j->second.grant_w > kEpsW ||
        j->second.held_w > kEpsW) {
      zero_since_.erase(name);
      continue;
    }
    const double since = zero_since_.try_emplace(name, now_s).first->second;
    if (now_s - since >= config_.suspend_after_s) {
      out.push_back({SuspendAction::Kind::kSuspend, name, m.slurm_job, m.demand_w});
    }
  }
  // Resumptions, oldest suspension first.
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [name, s] : suspended_) order.emplace_back(s.since_s, name);
  std::sort(order.begin(), order.end());
  double spare_w = status.opportunistic_pool_w - wanted_w;
  for (const auto& [since, name] : order) {
    const SuspendedJob& s = suspended_.at(name);
    const auto m = status.members.find(name);
    bool resume = false;
    if (m != status.members.end()) {
      // Still registered (its lease outlived the suspension so far): the plan's own grant.
      const auto j = ledger.jobs.find(name);
      resume = j != ledger.jobs.end() && j->second.lease == m->second.lease &&
               j->second.grant_w >= config_.min_duty * std::max(m->second.demand_w, kEpsW);
    } else if (spare_w >= config_.resume_fraction * s.demand_w - kEpsW) {
      resume = true;
      spare_w -= s.demand_w;
    }
    if (resume) out.push_back({SuspendAction::Kind::kResume, name, s.slurm_job, s.demand_w});
  }
  return out;
}

void Suspender::Applied(const SuspendAction& action, bool ok, double now_s) {
  if (action.kind == SuspendAction::Kind::kSuspend) {
    if (ok) {
      suspended_[action.job] = {action.slurm_job, action.demand_w, now_s};
      zero_since_.erase(action.job);
    } else {
      zero_since_[action.job] = now_s;  // tried again after suspend_after_s
    }
    return;
  }
  suspended_.erase(action.job);
}

}  // namespace headroom::slurm
