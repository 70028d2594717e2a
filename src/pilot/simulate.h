// Validation of the pilot statistics by simulation (docs/PILOT.md, "Validation"): pilots with a
// known injected effect, judged exactly as `headroom pilot report` judges a real one.
//
// Pure and deterministic: the baseline's block values in, coverage and false-positive counts
// out; every draw from the seed.
#pragma once

#include <cstdint>
#include <vector>

#include "pilot/statistics.h"

namespace headroom::pilot {

// n values of mean * (1 + e_t), e_t = phi e_{t-1} + sqrt(1 - phi^2) cv z_t, z_t standard
// normal, e_0 drawn from the stationary law (sd cv): AR(1) block values with coefficient of
// variation cv and lag-1 autocorrelation phi. REQUIRES: |phi| < 1, cv >= 0.
std::vector<double> Ar1Blocks(size_t n, double mean, double cv, double phi, uint64_t seed);

struct SimulationOptions {
  int pilots = 100;
  int64_t blocks_per_arm = 10;
  double effect_frac = 0.1;  // injected into the controlled blocks: value x (1 + effect)
  EffectOptions effect;      // as `pilot report` judges (alpha, resamples, permutations)
  uint64_t seed = 1;
};

struct SimulationResult {
  int pilots = 0;
  int64_t blocks_per_arm = 0;
  int covered = 0;           // effect pilots whose interval holds 100 x effect
  int detected = 0;          // effect pilots with p <= alpha (the power achieved)
  int null_significant = 0;  // null pilots with p <= alpha (false positives)
  int null_covered = 0;      // null pilots whose interval holds 0
  int undefined = 0;  // effect pilots without a relative interval (a resampled U mean was 0):
                      // counted as not covered
  double coverage() const { return pilots ? static_cast<double>(covered) / pilots : 0.0; }
  double power() const { return pilots ? static_cast<double>(detected) / pilots : 0.0; }
  double false_positive_rate() const {
    return pilots ? static_cast<double>(null_significant) / pilots : 0.0;
  }
};

// Each simulated pilot takes 2 x blocks_per_arm consecutive baseline blocks (the baseline's
// series joined end to end, read circularly from a random start, so their autocorrelation is
// kept), assigns the arms in pairs in a random order (as AlternatingSchedule), multiplies the
// controlled blocks by (1 + effect_frac), and is judged by EstimateEffect. Each pilot is
// repeated with no effect (its own start and order) for the false-positive count.
// REQUIRES: the baseline holds at least 2 x blocks_per_arm blocks; blocks_per_arm >= 2.
SimulationResult SimulatePilots(const std::vector<std::vector<double>>& baseline,
                                const SimulationOptions& options);

// The Wilson score interval of k successes in n at confidence 1 - alpha, for reporting
// simulated rates with their binomial uncertainty.
struct Interval {
  double lo = 0.0, hi = 1.0;
};
Interval WilsonInterval(int k, int n, double alpha = 0.05);

}  // namespace headroom::pilot
