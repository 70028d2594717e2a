#include "twin/curves.h"

#include <algorithm>

namespace headroom::twin {

double DecodeCurves::PowerW(double n) const {
  if (n <= 0.0) return idle_loaded_w;
  if (n >= n_min) return power_w(std::log2(n));
  const double at_min = power_w(std::log2(n_min));
  return idle_loaded_w + (at_min - idle_loaded_w) * std::log2(1.0 + n) / std::log2(1.0 + n_min);
}

double DecodeCurves::TokensPerS(double n) const {
  if (n <= 0.0) return 0.0;
  if (n >= n_min) return tokens_per_s(std::log2(n));
  return tokens_per_s(std::log2(n_min)) * n / n_min;
}

ClockCurve::ClockCurve(std::vector<Point> points) : points_(std::move(points)) {
  std::sort(points_.begin(), points_.end(),
            [](const Point& a, const Point& b) { return a.power_fraction > b.power_fraction; });
}

ClockCurve::Effect ClockCurve::Apply(double full_power_w, double limit_w) const {
  if (full_power_w <= limit_w || points_.empty() || full_power_w <= 0.0) {
    return {1.0, full_power_w};
  }
  const double q = limit_w / full_power_w;  // power fraction needed, < 1
  if (q <= points_.back().power_fraction) {
    return {points_.back().time_factor, full_power_w * points_.back().power_fraction};
  }
  // Linear interpolation between the two clock levels around q.
  for (size_t i = 1; i < points_.size(); ++i) {
    const Point& hi = points_[i - 1];
    const Point& lo = points_[i];
    if (q <= hi.power_fraction && q >= lo.power_fraction) {
      const double span = hi.power_fraction - lo.power_fraction;
      const double a = span > 0.0 ? (hi.power_fraction - q) / span : 0.0;
      return {hi.time_factor + a * (lo.time_factor - hi.time_factor), limit_w};
    }
  }
  return {points_.front().time_factor, limit_w};
}

}  // namespace headroom::twin
