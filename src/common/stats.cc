#include "common/stats.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace headroom {

double Quantile(std::span<double> values, double q) {
  assert(!values.empty() && q >= 0.0 && q <= 1.0);
  std::sort(values.begin(), values.end());
  const double h = static_cast<double>(values.size() - 1) * q;
  const double lo = std::floor(h);
  const auto i = static_cast<size_t>(lo);
  if (i + 1 >= values.size()) return values[i];
  return values[i] + (h - lo) * (values[i + 1] - values[i]);
}

double Median(std::span<double> values) { return Quantile(values, 0.5); }

double QuantileNearestRank(std::span<double> values, double q) {
  assert(!values.empty() && q >= 0.0 && q <= 1.0);
  const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  const size_t k = std::clamp<size_t>(rank, 1, values.size()) - 1;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(k), values.end());
  return values[k];
}

}  // namespace headroom
