#include "analysis/sum_series.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace headroom::analysis {

Result<GridSeries> SumOnGrid(std::span<const TimeSeries* const> series, double dt_s) {
  if (!(dt_s > 0.0)) {
    return Error::Input(
        fmt::format("cannot align GPUs on a grid: the median step dt is {} s (must be > 0)", dt_s));
  }
  double t_start = -std::numeric_limits<double>::infinity();
  double t_end = std::numeric_limits<double>::infinity();
  for (const TimeSeries* s : series) {
    t_start = std::max(t_start, s->t_s.front());
    t_end = std::min(t_end, s->t_s.back());
  }
  if (series.empty() || t_start > t_end) {
    return Error::Input(
        "cannot sum GPUs: their time ranges do not overlap (latest start after earliest end)");
  }
  constexpr double kMaxGridPoints = 5e8;
  if ((t_end - t_start) / dt_s > kMaxGridPoints) {
    return Error::Input(
        fmt::format("cannot align GPUs on a grid: {} s at dt {} s is more than {} "
                    "points",
                    t_end - t_start, dt_s, kMaxGridPoints));
  }
  GridSeries grid;
  grid.t_start_s = t_start;
  grid.dt_s = dt_s;
  for (size_t i = 0;; ++i) {
    if (grid.TimeAt(i) > t_end) break;
    grid.power_w.push_back(0.0);
  }
  for (const TimeSeries* s : series) {
    size_t j = 0;  // last sample at or before the grid time
    const size_t n = s->t_s.size();
    for (size_t i = 0; i < grid.power_w.size(); ++i) {
      const double t = grid.TimeAt(i);
      while (j + 1 < n && s->t_s[j + 1] <= t) ++j;
      grid.power_w[i] += s->power_w[j];
    }
  }
  return grid;
}

}  // namespace headroom::analysis
