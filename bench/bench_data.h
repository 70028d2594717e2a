// Deterministic inputs shared by the benchmarks.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace headroom::bench {

// A long-format trace: `gpus` GPUs interleaved, 10 Hz, powers with two decimals.
inline std::string LongTraceCsv(size_t rows, int gpus) {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> noise(0.0, 30.0);
  std::string csv = "t_s,gpu,power_w\n";
  csv.reserve(rows * 20);
  for (size_t i = 0; i < rows; ++i) {
    const size_t tick = i / static_cast<size_t>(gpus);
    const double p = std::abs(300.0 + 200.0 * std::sin(tick * 0.01) + noise(rng));
    fmt::format_to(std::back_inserter(csv), "{:.1f},{},{:.2f}\n", tick * 0.1, i % gpus, p);
  }
  return csv;
}

struct Series {
  std::vector<double> t_s, power_w;
};

inline Series SeriesOf(size_t n) {
  std::mt19937_64 rng(2);
  std::normal_distribution<double> noise(0.0, 30.0);
  Series s;
  s.t_s.resize(n);
  s.power_w.resize(n);
  for (size_t i = 0; i < n; ++i) {
    s.t_s[i] = std::round(i * 0.1 * 10.0) / 10.0;
    s.power_w[i] = 300.0 + 200.0 * std::sin(i * 0.01) + noise(rng);
  }
  return s;
}

}  // namespace headroom::bench
