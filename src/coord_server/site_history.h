// The coordinator's recent past, for its site page (GET /v1/history): one point per period for
// the last hour, so a page opened late has history. Core logic: no clock, no I/O (the host
// stamps each point with the wall clock it is given).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "coord/coordinator.h"

namespace headroom::coord {

struct SiteHistoryJob {
  std::optional<double> grant_w;  // admitted: its grant; none in standby
  std::optional<double> power_w;  // what its member last published (with its node overhead)
};

struct SiteHistoryPoint {
  double unix_s = 0.0;  // the wall clock at the end of the period
  std::string role;     // this replica's: leader, follower, candidate
  int64_t term = 0;
  // The ledger's, while this replica leads; none otherwise (it has no current ledger).
  std::optional<double> site_budget_w, target_site_budget_w, reserve_w, held_w;
  // The site's true power as its members publish it: Σ power_w of the jobs that say (their GPUs
  // and node overheads); none when no member says.
  std::optional<double> power_w;
  std::map<std::string, SiteHistoryJob> jobs;
};

// A point from a status, as CoordinatorStatusJson reads it.
SiteHistoryPoint PointOf(const CoordinatorStatus& status, double unix_s);

class SiteHistory {
 public:
  // Keeps `keep_s` of points `period_s` apart: ceil(keep_s / period_s) points, at most
  // kMaxPoints. REQUIRES: keep_s > 0, period_s > 0.
  SiteHistory(double keep_s, double period_s);
  static constexpr size_t kMaxPoints = 36000;

  void Add(SiteHistoryPoint point);
  // The points after `after_unix_s`, oldest first.
  std::vector<SiteHistoryPoint> After(double after_unix_s) const;
  size_t capacity() const { return capacity_; }

 private:
  size_t capacity_;
  std::deque<SiteHistoryPoint> points_;
};

}  // namespace headroom::coord
