#include "coord_server/site_history.h"

#include <algorithm>
#include <cmath>

namespace headroom::coord {

SiteHistoryPoint PointOf(const CoordinatorStatus& status, double unix_s) {
  SiteHistoryPoint p;
  p.unix_s = unix_s;
  p.role = status.role;
  p.term = status.term;
  const bool leading = status.role == "leader" && status.ledger.has_value();
  if (leading) {
    const Ledger& l = *status.ledger;
    p.site_budget_w = l.site_budget_w;
    p.target_site_budget_w = l.target_site_budget_w;
    p.reserve_w = l.reserve_w;
    p.held_w = l.HeldW();
    for (const auto& [job, lj] : l.jobs) p.jobs[job].grant_w = lj.grant_w;
    for (const auto& [job, sb] : l.standby) p.jobs.try_emplace(job);
  }
  for (const auto& [job, m] : status.members) {
    if (!std::isfinite(m.power_w)) continue;
    p.jobs[job].power_w = m.power_w;
    p.power_w = p.power_w.value_or(0.0) + m.power_w;
  }
  return p;
}

SiteHistory::SiteHistory(double keep_s, double period_s)
    : capacity_(std::min(kMaxPoints, static_cast<size_t>(std::ceil(keep_s / period_s)))) {
  capacity_ = std::max<size_t>(capacity_, 1);
}

void SiteHistory::Add(SiteHistoryPoint point) {
  // A wall clock stepped back (NTP) must not unsort the points After() searches.
  if (!points_.empty()) point.unix_s = std::max(point.unix_s, points_.back().unix_s);
  if (points_.size() == capacity_) points_.pop_front();
  points_.push_back(std::move(point));
}

std::vector<SiteHistoryPoint> SiteHistory::After(double after_unix_s) const {
  auto first = std::upper_bound(points_.begin(), points_.end(), after_unix_s,
                                [](double t, const SiteHistoryPoint& p) { return t < p.unix_s; });
  return {first, points_.end()};
}

}  // namespace headroom::coord
