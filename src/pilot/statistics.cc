#include "pilot/statistics.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numeric>

#include "common/stats.h"

namespace headroom::pilot {

uint64_t Rng::Index(uint64_t n) {
  assert(n > 0);
  // Lemire, "Fast random integer generation in an interval" (2019).
  unsigned __int128 m = static_cast<unsigned __int128>(engine_()) * n;
  auto low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(engine_()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

double Rng::Normal() {
  constexpr double kTwoPi = 6.283185307179586;
  double u1 = Uniform();
  while (u1 <= 0.0) u1 = Uniform();
  const double u2 = Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

double NormalQuantile(double p) {
  assert(p > 0.0 && p < 1.0);
  // P. J. Acklam's rational approximation (relative error 1.15e-9) ...
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                 -2.759285104469687e+02, 1.383577518672690e+02,
                                 -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                 -1.556989798598866e+02, 6.680131188771972e+01,
                                 -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                 -2.400758277161838e+00, -2.549732539343734e+00,
                                 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                                 2.445134137142996e+00, 3.754408661907416e+00};
  constexpr double kLow = 0.02425;
  double x = 0.0;
  if (p < kLow) {
    const double q = std::sqrt(-2.0 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  } else if (p <= 1.0 - kLow) {
    const double q = p - 0.5;
    const double r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0);
  } else {
    const double q = std::sqrt(-2.0 * std::log(1.0 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  }
  // ... refined by one step of Halley's method on Phi(x) = erfc(-x / sqrt 2) / 2.
  constexpr double kSqrt2 = 1.4142135623730951;
  constexpr double kSqrt2Pi = 2.5066282746310002;
  const double e = 0.5 * std::erfc(-x / kSqrt2) - p;
  const double u = e * kSqrt2Pi * std::exp(x * x / 2.0);
  return x - u / (1.0 + x * u / 2.0);
}

double StudentTCdf(double t, int64_t df) {
  assert(df >= 1);
  constexpr double kPi = 3.141592653589793;
  const auto nu = static_cast<double>(df);
  const double theta = std::atan(std::abs(t) / std::sqrt(nu));
  const double c = std::cos(theta), c2 = c * c, sn = std::sin(theta);
  double a = 0.0;  // P(|T| <= |t|)
  if (df % 2 == 0) {
    double term = 1.0, sum = 1.0;
    for (int64_t k = 2; k <= df - 2; k += 2) {
      term *= c2 * static_cast<double>(k - 1) / static_cast<double>(k);
      sum += term;
    }
    a = sn * sum;
  } else {
    double sum = 0.0;
    if (df > 1) {
      double term = c;
      sum = c;
      for (int64_t k = 3; k <= df - 2; k += 2) {
        term *= c2 * static_cast<double>(k - 1) / static_cast<double>(k);
        sum += term;
      }
    }
    a = 2.0 / kPi * (theta + sn * sum);
  }
  return t >= 0.0 ? 0.5 + 0.5 * a : 0.5 - 0.5 * a;
}

double StudentTQuantile(double p, int64_t df) {
  assert(p > 0.0 && p < 1.0 && df >= 1);
  constexpr double kPi = 3.141592653589793;
  if (df == 1) return std::tan(kPi * (p - 0.5));
  if (df == 2) return (2.0 * p - 1.0) / std::sqrt(2.0 * p * (1.0 - p));
  const auto nu = static_cast<double>(df);
  const double z = NormalQuantile(p);
  const double z2 = z * z;
  const double g1 = (z2 + 1.0) * z / 4.0;
  const double g2 = ((5.0 * z2 + 16.0) * z2 + 3.0) * z / 96.0;
  const double g3 = (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) * z / 384.0;
  const double g4 =
      ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) * z / 92160.0;
  double t = z + (g1 + (g2 + (g3 + g4 / nu) / nu) / nu) / nu;
  const double log_norm =
      std::lgamma((nu + 1.0) / 2.0) - std::lgamma(nu / 2.0) - 0.5 * std::log(nu * kPi);
  for (int i = 0; i < 4; ++i) {
    const double density = std::exp(log_norm - (nu + 1.0) / 2.0 * std::log1p(t * t / nu));
    t -= (StudentTCdf(t, df) - p) / density;
  }
  return t;
}

double Mean(std::span<const double> x) {
  if (x.empty()) return 0.0;
  return std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(x.size());
}

double SampleVariance(std::span<const double> x) {
  assert(x.size() >= 2);
  const double m = Mean(x);
  double ss = 0.0;
  for (double v : x) ss += (v - m) * (v - m);
  return ss / static_cast<double>(x.size() - 1);
}

std::optional<double> Lag1Autocorrelation(const std::vector<std::vector<double>>& series) {
  double sum = 0.0;
  size_t n = 0;
  for (const auto& s : series) {
    for (double v : s) sum += v;
    n += s.size();
  }
  if (n == 0) return std::nullopt;
  const double m = sum / static_cast<double>(n);
  double num = 0.0, den = 0.0;
  size_t pairs = 0;
  for (const auto& s : series) {
    for (size_t i = 0; i < s.size(); ++i) {
      den += (s[i] - m) * (s[i] - m);
      if (i + 1 < s.size()) {
        num += (s[i] - m) * (s[i + 1] - m);
        ++pairs;
      }
    }
  }
  if (pairs == 0 || !(den > 0.0)) return std::nullopt;
  return num / den;
}

double VarianceInflation(double rho) {
  if (!(rho > 0.0)) return 1.0;
  const double r = std::min(rho, kMaxRho);
  return (1.0 + r) / (1.0 - r);
}

namespace {

// C(n, k) as a double (exact below 2^53).
double Binomial(size_t n, size_t k) {
  k = std::min(k, n - k);
  double c = 1.0;
  for (size_t i = 1; i <= k; ++i) c = c * static_cast<double>(n - k + i) / static_cast<double>(i);
  return std::round(c);
}

}  // namespace

int MinBlocksPerArmForPermutation(double alpha) {
  assert(alpha > 0.0 && alpha < 1.0);
  int n = 1;
  while (2.0 / Binomial(2 * static_cast<size_t>(n), static_cast<size_t>(n)) > alpha) ++n;
  return n;
}

SampleSize BlocksPerArm(const SampleSizeInput& in) {
  assert(in.mean != 0.0 && in.effect_frac != 0.0 && in.sd >= 0.0);
  SampleSize s;
  s.z_alpha = NormalQuantile(1.0 - in.alpha / 2.0);
  s.z_power = NormalQuantile(in.power);
  s.variance_inflation = VarianceInflation(in.rho);
  s.delta = std::abs(in.effect_frac * in.mean);
  const double z = s.z_alpha + s.z_power;
  s.formula_blocks_per_arm =
      2.0 * z * z * in.sd * in.sd * s.variance_inflation / (s.delta * s.delta);
  s.permutation_floor = MinBlocksPerArmForPermutation(in.alpha);
  // The ceiling, with a hair of tolerance so that 63.0000000001 from rounding stays 63.
  const double n = std::ceil(s.formula_blocks_per_arm * (1.0 - 1e-12));
  s.blocks_per_arm =
      std::max<int64_t>(s.permutation_floor, n >= 9.2e18 ? INT64_MAX : static_cast<int64_t>(n));
  return s;
}

namespace {

// The tolerance under which two relabellings' statistics count as equal (sums in a different
// order differ in the last bits).
double Tolerance(std::span<const double> all, double observed) {
  double scale = 0.0;
  for (double v : all) scale = std::max(scale, std::abs(v));
  return 1e-10 * std::max(scale, std::abs(observed));
}

}  // namespace

PermutationResult PermutationTest(std::span<const double> controlled,
                                  std::span<const double> uncontrolled, uint64_t monte_carlo,
                                  uint64_t seed, uint64_t max_exact) {
  assert(!controlled.empty() && !uncontrolled.empty());
  std::vector<double> all(controlled.begin(), controlled.end());
  all.insert(all.end(), uncontrolled.begin(), uncontrolled.end());
  const size_t n = all.size();
  const size_t k = controlled.size();
  const double total = std::accumulate(all.begin(), all.end(), 0.0);
  const auto kd = static_cast<double>(k);
  const auto ud = static_cast<double>(n - k);
  const auto statistic = [&](double sum_c) { return std::abs(sum_c / kd - (total - sum_c) / ud); };
  const double observed = statistic(std::accumulate(controlled.begin(), controlled.end(), 0.0));
  const double threshold = observed - Tolerance(all, observed);

  PermutationResult r;
  const double count = Binomial(n, k);
  if (count <= static_cast<double>(max_exact)) {
    // Every k-subset of the n blocks, in lexicographic order of indices.
    std::vector<size_t> idx(k);
    std::iota(idx.begin(), idx.end(), size_t{0});
    uint64_t hits = 0, total_sets = 0;
    while (true) {
      double sum_c = 0.0;
      for (size_t i : idx) sum_c += all[i];
      ++total_sets;
      if (statistic(sum_c) >= threshold) ++hits;
      size_t i = k;
      while (i > 0 && idx[i - 1] == n - k + (i - 1)) --i;
      if (i == 0) break;
      ++idx[i - 1];
      for (size_t j = i; j < k; ++j) idx[j] = idx[j - 1] + 1;
    }
    r.exact = true;
    r.permutations = total_sets;
    r.p_value = static_cast<double>(hits) / static_cast<double>(total_sets);
    return r;
  }
  Rng rng(seed);
  std::vector<double> shuffled = all;
  uint64_t hits = 0;
  for (uint64_t m = 0; m < monte_carlo; ++m) {
    // A partial Fisher-Yates shuffle: the first k places are a uniform random k-subset.
    double sum_c = 0.0;
    for (size_t i = 0; i < k; ++i) {
      const size_t j = i + static_cast<size_t>(rng.Index(n - i));
      std::swap(shuffled[i], shuffled[j]);
      sum_c += shuffled[i];
    }
    if (statistic(sum_c) >= threshold) ++hits;
  }
  r.exact = false;
  r.permutations = monte_carlo;
  r.p_value = static_cast<double>(1 + hits) / static_cast<double>(1 + monte_carlo);
  return r;
}

double ExpandedAlpha(double alpha, size_t n_controlled, size_t n_uncontrolled) {
  const size_t n = std::min(n_controlled, n_uncontrolled);
  if (n < 2) return alpha;
  const auto nd = static_cast<double>(n);
  const auto df = static_cast<int64_t>(n_controlled + n_uncontrolled - 2);
  const double z = std::sqrt(nd / (nd - 1.0)) * StudentTQuantile(1.0 - alpha / 2.0, df);
  return std::erfc(z / std::sqrt(2.0));  // 2 (1 - Phi(z))
}

BootstrapResult BootstrapInterval(std::span<const double> controlled,
                                  std::span<const double> uncontrolled, double alpha,
                                  uint64_t resamples, uint64_t seed, bool expand) {
  assert(!controlled.empty() && !uncontrolled.empty() && resamples >= 1);
  Rng rng(seed);
  std::vector<double> differences(resamples);
  std::vector<double> effects(resamples);
  bool effect_defined = true;
  const auto resample_mean = [&rng](std::span<const double> x) {
    double sum = 0.0;
    for (size_t i = 0; i < x.size(); ++i) sum += x[rng.Index(x.size())];
    return sum / static_cast<double>(x.size());
  };
  for (uint64_t b = 0; b < resamples; ++b) {
    const double c = resample_mean(controlled);
    const double u = resample_mean(uncontrolled);
    differences[b] = c - u;
    if (u == 0.0) {
      effect_defined = false;
    } else {
      effects[b] = 100.0 * (c / u - 1.0);
    }
  }
  BootstrapResult r;
  const double a = expand ? ExpandedAlpha(alpha, controlled.size(), uncontrolled.size()) : alpha;
  const double lo = a / 2.0, hi = 1.0 - a / 2.0;
  r.difference_lo = Quantile(differences, lo);
  r.difference_hi = Quantile(differences, hi);
  if (effect_defined) {
    r.effect_lo_pct = Quantile(effects, lo);
    r.effect_hi_pct = Quantile(effects, hi);
  }
  return r;
}

Effect EstimateEffect(std::span<const double> controlled, std::span<const double> uncontrolled,
                      const EffectOptions& options) {
  Effect e;
  e.controlled_blocks = controlled.size();
  e.uncontrolled_blocks = uncontrolled.size();
  e.controlled_mean = Mean(controlled);
  e.uncontrolled_mean = Mean(uncontrolled);
  e.difference = e.controlled_mean - e.uncontrolled_mean;
  if (e.uncontrolled_mean != 0.0) {
    e.effect_pct = 100.0 * (e.controlled_mean / e.uncontrolled_mean - 1.0);
  }
  // Two streams from one seed: the bootstrap's and the permutations'.
  e.interval = BootstrapInterval(controlled, uncontrolled, options.alpha,
                                 options.bootstrap_resamples, options.seed);
  e.permutation =
      PermutationTest(controlled, uncontrolled, options.permutations,
                      options.seed ^ 0x9E3779B97F4A7C15ull, options.max_exact_permutations);
  e.significant = e.permutation.p_value <= options.alpha;
  return e;
}

}  // namespace headroom::pilot
