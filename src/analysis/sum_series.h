// The sum of several GPUs' power on one uniform grid (scope `sum`, fleets).
//
// Grid: t_start + i*dt for i = 0, 1, ... while <= t_end, where t_start is the latest first-sample
// time over GPUs and t_end the earliest last-sample time. Each GPU contributes its last sample at
// or before the grid time; the value is their sum.
#pragma once

#include <span>
#include <vector>

#include "common/error.h"

namespace headroom::analysis {

struct TimeSeries {
  std::vector<double> t_s;
  std::vector<double> power_w;
};

struct GridSeries {
  double t_start_s = 0.0;
  double dt_s = 0.0;
  std::vector<double> power_w;  // value at t_start + i*dt

  double TimeAt(size_t i) const { return t_start_s + static_cast<double>(i) * dt_s; }
};

// REQUIRES: every series is non-empty and time-ordered. Fails if dt_s <= 0 or the series do not
// overlap in time.
Result<GridSeries> SumOnGrid(std::span<const TimeSeries* const> series, double dt_s);

}  // namespace headroom::analysis
