#include "twin/curves.h"

#include <algorithm>
#include <iterator>

namespace headroom::twin {

namespace {

// d/dn of a logistic in log2 n.
double SlopeInN(const Logistic4& f, double n) {
  const double e = std::exp(-f.k * (std::log2(n) - f.x0));
  return f.l * f.k * e / ((1.0 + e) * (1.0 + e)) / (n * std::log(2.0));
}

}  // namespace

DecodeCurves::MemoryBound DecodeCurves::Below() const {
  MemoryBound m;
  const double tps = std::max(tokens_per_s(std::log2(n_min)), 1e-12);
  const double tps_slope = SlopeInN(tokens_per_s, n_min);
  const double t_min = n_min / tps;  // the step time at n_min
  // t(n) = n / TPS(n): slope (TPS - n TPS') / TPS^2. A throughput that does not rise with n
  // leaves the step time flat (throughput proportional to n).
  m.c_s = tps_slope > 0.0 ? std::max(0.0, (tps - n_min * tps_slope) / (tps * tps)) : 0.0;
  m.t0_s = t_min - m.c_s * n_min;
  // X(n) = (P(n) - idle) t(n): slope P' t + (P - idle) t'.
  const double above = std::max(0.0, power_w(std::log2(n_min)) - idle_loaded_w);
  const double x_min = above * t_min;
  m.e1_j = std::max(0.0, SlopeInN(power_w, n_min) * t_min + above * m.c_s);
  m.e0_j = x_min - m.e1_j * n_min;
  if (m.e0_j < 0.0) {  // steeper than streaming allows: all of it per sequence
    m.e0_j = 0.0;
    m.e1_j = x_min / n_min;
  }
  return m;
}

DecodeCurves::MemoryBound DecodeCurves::BelowCached() const {
  struct Cached {
    bool valid = false;
    double key[10] = {};
    MemoryBound value;
  };
  thread_local Cached cached;
  const double key[10] = {power_w.b0,      power_w.l,      power_w.x0,      power_w.k,
                          tokens_per_s.b0, tokens_per_s.l, tokens_per_s.x0, tokens_per_s.k,
                          n_min,           idle_loaded_w};
  if (!cached.valid || !std::equal(std::begin(key), std::end(key), std::begin(cached.key))) {
    std::copy(std::begin(key), std::end(key), std::begin(cached.key));
    cached.value = Below();
    cached.valid = true;
  }
  return cached.value;
}

double DecodeCurves::PowerW(double n) const {
  if (n <= 0.0) return idle_loaded_w;
  if (n >= n_min) return power_w(std::log2(n));
  const MemoryBound m = BelowCached();
  const auto stepping = [&](double k) {
    return idle_loaded_w + (m.e0_j + m.e1_j * k) / (m.t0_s + m.c_s * k);
  };
  if (n >= 1.0) return stepping(n);
  const double at_one = n_min > 1.0 ? stepping(1.0) : power_w(std::log2(n_min));
  const double top = std::min(1.0, n_min);
  return idle_loaded_w + (at_one - idle_loaded_w) * n / top;
}

double DecodeCurves::TokensPerS(double n) const {
  if (n <= 0.0) return 0.0;
  if (n >= n_min) return tokens_per_s(std::log2(n));
  const MemoryBound m = BelowCached();
  return n / (m.t0_s + m.c_s * n);
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
