// Order statistics shared by every module, with one definition each.
#pragma once

#include <span>

namespace headroom {

// The q-quantile of the values by linear interpolation between order statistics (Hyndman & Fan
// type 7, the default of numpy.quantile and pandas): with the values sorted as x[0..n-1],
// h = (n - 1) q, result = x[floor h] + (h - floor h) (x[floor h + 1] - x[floor h]).
// REQUIRES: !values.empty(), 0 <= q <= 1. Sorts `values` in place.
double Quantile(std::span<double> values, double q);

// The median: the middle value, or the mean of the two middle values. Same as Quantile(v, 0.5).
// REQUIRES: !values.empty(). Reorders `values`.
double Median(std::span<double> values);

// The q-quantile by nearest rank (Hyndman & Fan type 1, no interpolation): the smallest value
// with at least a fraction q of the values at or below it, x[max(1, ceil(q n)) - 1] of the
// sorted values; always one of the values. What latency and settle-time summaries report
// (a p99 that was observed).
// REQUIRES: !values.empty(), 0 <= q <= 1. Reorders `values`.
double QuantileNearestRank(std::span<double> values, double q);

}  // namespace headroom
