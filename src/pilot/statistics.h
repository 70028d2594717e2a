// The statistics of a site pilot (docs/PILOT.md): a two-arm comparison of block means, its
// sample size under autocorrelation, a block bootstrap and a permutation test.
//
// Pure: no I/O, no clocks; every random draw comes from a seeded pilot::Rng, so a result is a
// function of its inputs and its seed. Thread-safe: no shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

namespace headroom::pilot {

// A seeded generator whose draws are the same on every platform: std::mt19937_64 (its output
// is fixed by the standard) with our own uniform and normal transforms (the standard
// distributions are implementation-defined).
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  // Uniform in [0, n). REQUIRES: n > 0. Lemire's multiply-and-reject: unbiased.
  uint64_t Index(uint64_t n);
  // Uniform in [0, 1), 53 bits.
  double Uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  // Standard normal (Box-Muller; one value per call).
  double Normal();
  uint64_t Next() { return engine_(); }

 private:
  std::mt19937_64 engine_;
};

// The standard normal quantile Phi^-1(p) (Acklam's rational approximation refined by one
// Halley step on erfc: relative error below 1e-14). REQUIRES: 0 < p < 1.
double NormalQuantile(double p);

// Student's t distribution with a whole number df of degrees of freedom: the CDF by the finite
// series of Abramowitz & Stegun 26.7.3-4, the quantile from the Cornish-Fisher expansion
// (26.7.5) polished by Newton steps on that CDF (closed forms at df 1 and 2).
// REQUIRES: 0 < p < 1, df >= 1.
double StudentTCdf(double t, int64_t df);
double StudentTQuantile(double p, int64_t df);

double Mean(std::span<const double> x);
// The sample variance (n - 1 in the denominator). REQUIRES: x.size() >= 2.
double SampleVariance(std::span<const double> x);

// The lag-1 autocorrelation of one or more block series (each in time order), about their
// common mean m:  r1 = sum_s sum_i (x[s][i] - m)(x[s][i+1] - m) / sum_s sum_i (x[s][i] - m)^2.
// Pairs never straddle two series. nullopt without a pair or with zero variance.
std::optional<double> Lag1Autocorrelation(const std::vector<std::vector<double>>& series);

// The variance inflation of a mean of n blocks whose lag-1 autocorrelation is rho, AR(1):
// (1 + rho) / (1 - rho) for rho > 0 (rho capped at kMaxRho), 1 for rho <= 0 (a negative
// correlation is not counted on).
inline constexpr double kMaxRho = 0.99;
double VarianceInflation(double rho);

// The fewest blocks per arm (equal arms) at which the two-sided permutation test can reach
// p <= alpha at all: the smallest n with 2 / C(2n, n) <= alpha. REQUIRES: 0 < alpha < 1.
int MinBlocksPerArmForPermutation(double alpha);

struct SampleSizeInput {
  double mean = 0.0;         // baseline block mean of the metric
  double sd = 0.0;           // baseline block standard deviation
  double rho = 0.0;          // lag-1 autocorrelation of the block series
  double effect_frac = 0.1;  // relative effect to detect (0.1 = 10 %); sign ignored
  double alpha = 0.05;       // two-sided
  double power = 0.8;
};
struct SampleSize {
  int64_t blocks_per_arm = 0;
  double z_alpha = 0.0;                 // Phi^-1(1 - alpha/2)
  double z_power = 0.0;                 // Phi^-1(power)
  double variance_inflation = 1.0;      // VarianceInflation(rho)
  double delta = 0.0;                   // |effect_frac * mean|, the difference to detect
  double formula_blocks_per_arm = 0.0;  // before rounding up and the permutation floor
  int64_t permutation_floor = 0;        // MinBlocksPerArmForPermutation(alpha)
};
// Blocks per arm to detect a difference delta = |effect * mean| of block means (two-sided
// alpha, given power), normal approximation, variance inflated for autocorrelation:
//   n = ceil( 2 (z_{1-alpha/2} + z_{power})^2 sd^2 VIF(rho) / delta^2 ),
// then at least MinBlocksPerArmForPermutation(alpha).
// REQUIRES: mean != 0, effect_frac != 0, sd >= 0, 0 < alpha < 1, 0 < power < 1.
SampleSize BlocksPerArm(const SampleSizeInput& in);

// ---------------------------------------------------------------------------------------------
// Judging a pilot: controlled blocks against uncontrolled blocks.

// The permutation test of equal block means: the statistic is |mean(C) - mean(U)|; the arm
// labels are permuted across all blocks (arm sizes kept). Exact (every one of C(n, n_C)
// relabellings, the observed one included) when there are at most `max_exact` of them, else
// Monte Carlo with `monte_carlo` random relabellings, p = (1 + hits) / (1 + monte_carlo).
struct PermutationResult {
  double p_value = 1.0;
  bool exact = false;
  uint64_t permutations = 0;  // relabellings evaluated
};
inline constexpr uint64_t kDefaultMaxExactPermutations = 100000;
// REQUIRES: both arms non-empty.
PermutationResult PermutationTest(std::span<const double> controlled,
                                  std::span<const double> uncontrolled, uint64_t monte_carlo,
                                  uint64_t seed, uint64_t max_exact = kDefaultMaxExactPermutations);

// The block bootstrap: `resamples` times, draw n_C blocks from the controlled arm and n_U from
// the uncontrolled arm, each with replacement, and compute the difference of means and the
// relative effect 100 (mean*(C) / mean*(U) - 1); the interval is the a/2 and 1 - a/2 quantiles
// of each (quantiles type 7). With `expand` (Hesterberg's expanded percentile interval) a is
// set so that Phi^-1(1 - a/2) = sqrt(n / (n - 1)) t_{1 - alpha/2, n_C + n_U - 2},
// n = min(n_C, n_U): the plain percentile interval (a = alpha) is too narrow with few blocks,
// by the bootstrap's plug-in variance ((n - 1)/n of the sample's) and by z in place of t.
struct BootstrapResult {
  double difference_lo = 0.0, difference_hi = 0.0;
  std::optional<double> effect_lo_pct, effect_hi_pct;  // none when a resample's U mean is 0
};
// REQUIRES: both arms non-empty, resamples >= 1, 0 < alpha < 1.
BootstrapResult BootstrapInterval(std::span<const double> controlled,
                                  std::span<const double> uncontrolled, double alpha,
                                  uint64_t resamples, uint64_t seed, bool expand = true);
// The level a the expanded interval uses (see above); alpha when an arm has one block.
double ExpandedAlpha(double alpha, size_t n_controlled, size_t n_uncontrolled);

struct EffectOptions {
  double alpha = 0.05;  // two-sided; the interval is at 1 - alpha
  uint64_t bootstrap_resamples = 10000;
  uint64_t permutations = 10000;  // Monte Carlo relabellings when exact is too many
  uint64_t max_exact_permutations = kDefaultMaxExactPermutations;
  uint64_t seed = 1;
};
struct Effect {
  size_t controlled_blocks = 0, uncontrolled_blocks = 0;
  double controlled_mean = 0.0, uncontrolled_mean = 0.0;
  double difference = 0.0;           // controlled - uncontrolled
  std::optional<double> effect_pct;  // 100 (controlled / uncontrolled - 1)
  BootstrapResult interval;
  PermutationResult permutation;
  bool significant = false;  // p_value <= alpha
};
// REQUIRES: both arms non-empty.
Effect EstimateEffect(std::span<const double> controlled, std::span<const double> uncontrolled,
                      const EffectOptions& options);

}  // namespace headroom::pilot
