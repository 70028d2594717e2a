// The coordinator's recent past, for its site page (GET /v1/history): one point per period for
// the last hour, so a page opened late has history. Core logic: no clock, no I/O (the host
// stamps each point with the wall clock it is given).
//
// Compact and bounded (issue 53): a point keeps its site-wide numbers as doubles and each job's
// grant and power as floats (7 significant digits: a chart's, not the ledger's), its jobs'
// names shared with the points before it while the set stays the same; at most
// kMaxStoredJobValues job values in all (32 MiB), the oldest points dropped beyond — an hour
// at a 1 s period for a site of up to 1,165 jobs, less for a larger one. Points are immutable
// once added, so an answer is built from shared references outside the history's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coord/coordinator.h"

namespace headroom::coord_server {

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
SiteHistoryPoint PointOf(const coord::CoordinatorStatus& status, double unix_s);

// The jobs of one or more consecutive points: their names, sorted, and each as a JSON key.
struct SiteHistoryJobSet {
  std::vector<std::string> names;
  std::vector<std::string> keys;  // "\"name\":"
};

// A point as stored: NaN where SiteHistoryPoint has none.
struct StoredSitePoint {
  double unix_s = 0.0;
  int64_t term = 0;
  std::string role;
  double site_budget_w, target_site_budget_w, reserve_w, held_w, power_w;
  std::shared_ptr<const SiteHistoryJobSet> jobs;
  std::vector<float> values;  // grant_w, power_w of each job in `jobs`, in its order
};

// What GET /v1/history asks: the points after `after_unix_s`, oldest first, at most `limit`
// of them and, past the first, at most `max_bytes` of JSON.
struct SiteHistoryQuery {
  double after_unix_s = -std::numeric_limits<double>::infinity();
  size_t limit = 3600;
  size_t max_bytes = 1 << 20;
};

class SiteHistory {
 public:
  // Keeps `keep_s` of points `period_s` apart: ceil(keep_s / period_s) points, at most
  // kMaxPoints, and at most `max_job_values` job values. REQUIRES: keep_s > 0, period_s > 0.
  SiteHistory(double keep_s, double period_s, size_t max_job_values = kMaxStoredJobValues);
  static constexpr size_t kMaxPoints = 36000;
  static constexpr size_t kMaxStoredJobValues = size_t{1} << 23;  // floats: 32 MiB

  // Stamps strictly after the point before (a wall clock stepped back, NTP, must not unsort the
  // points, nor two share a time a page could end between).
  void Add(const SiteHistoryPoint& point);
  // The points after `after_unix_s`, oldest first, at most `limit`: shared, immutable.
  std::vector<std::shared_ptr<const StoredSitePoint>> After(double after_unix_s,
                                                            size_t limit) const;
  // Decoded, for tests and tools.
  std::vector<SiteHistoryPoint> AfterDecoded(double after_unix_s) const;
  size_t capacity() const { return capacity_; }
  size_t size() const { return points_.size(); }
  size_t stored_job_values() const { return values_; }

 private:
  size_t capacity_;
  size_t max_job_values_;
  size_t values_ = 0;  // Σ values.size() over points_
  std::deque<std::shared_ptr<const StoredSitePoint>> points_;
};

SiteHistoryPoint Decode(const StoredSitePoint& p);

// The answer to GET /v1/history, from `points` (After's for the query's after, one more than its
// limit to know whether more remain):
// {"period_s", "points": [{"unix_s", "role", "term", "site_budget_w", "target_site_budget_w",
// "reserve_w", "held_w", "power_w", "jobs": {NAME: {"grant_w", "power_w"}}}], "more",
// "next_after"}: `more` when points remain after the last one given (ask again with
// ?after=next_after); the first point is always given, the rest while the answer stays within
// query.max_bytes.
std::string SiteHistoryPageJson(const std::vector<std::shared_ptr<const StoredSitePoint>>& points,
                                const SiteHistoryQuery& query, double period_s);

}  // namespace headroom::coord_server
