// Small numeric kernels shared by the statistics. Four partial sums let the additions pipeline;
// the result differs from a left-to-right sum by a few ulps of the total at most (and is closer
// to the exact sum in general).
#pragma once

#include <algorithm>
#include <cstddef>

namespace headroom::analysis {

[[gnu::always_inline]] inline double Sum(const double* x, size_t n) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += x[i];
    s1 += x[i + 1];
    s2 += x[i + 2];
    s3 += x[i + 3];
  }
  for (; i < n; ++i) s0 += x[i];
  return (s0 + s1) + (s2 + s3);
}

// REQUIRES: n > 0.
[[gnu::always_inline]] inline double Max(const double* x, size_t n) {
  double m0 = x[0], m1 = x[0], m2 = x[0], m3 = x[0];
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    m0 = std::max(m0, x[i]);
    m1 = std::max(m1, x[i + 1]);
    m2 = std::max(m2, x[i + 2]);
    m3 = std::max(m3, x[i + 3]);
  }
  for (; i < n; ++i) m0 = std::max(m0, x[i]);
  return std::max(std::max(m0, m1), std::max(m2, m3));
}

}  // namespace headroom::analysis
