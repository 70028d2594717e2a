// Value-based allocation (docs/SITE.md, "Allocation by value"): the watts above the floors go
// where they make the most tokens. Each job brings its value curve -- tokens/s against its job
// budget -- and the allocator water-fills on the curves' slopes (tokens/s per W), highest
// first, optionally after a max-min fairness level. Pure: no store, no clock.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace headroom::coord {

struct ValuePoint {
  double budget_w = 0.0;      // job budget (GPUs and node overhead)
  double tokens_per_s = 0.0;  // what the job makes on it
};

enum class Fairness {
  kNone,    // water-filling on value alone
  kMaxMin,  // first the largest common fraction of every job's attainable gain, then by value
};

struct ValueJob {
  double floor_w = 0.0;
  double demand_w = 0.0;  // >= floor_w: nothing is granted above it
  // Points in any order; empty: no evidence, flat (the job gets a share of what value leaves).
  std::vector<ValuePoint> curve;
};

// The curve the allocator uses: the points within [floor, demand], made non-decreasing, with
// their upper concave hull taken (a concave curve makes greedy water-filling optimal), from the
// floor (tokens/s there: interpolated, else the lowest point's) to the demand (flat beyond the
// last point). Always at least one point, at the floor.
std::vector<ValuePoint> ConcaveCurve(const ValueJob& job);

// Tokens/s on a concave curve at `budget_w` (linear between points, flat outside).
double CurveTokensPerS(const std::vector<ValuePoint>& concave, double budget_w);

// Every floor, then: with kMaxMin the largest level L in [0, 1] at which every job gets the
// budget that makes floor tokens + L x (its tokens at demand - at floor); then the rest by
// water-filling on the concave curves' slopes, highest first (equal slopes share in proportion
// to their segments' watts); what no slope above zero takes, in proportion to demand left.
// Capped at demand; at most `available_w` in all. REQUIRES: the floors fit in available_w.
std::map<std::string, double> AllocateByValue(double available_w,
                                              const std::map<std::string, ValueJob>& jobs,
                                              Fairness fairness);

}  // namespace headroom::coord
