#include "pilot/simulate.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace headroom::pilot {

std::vector<double> Ar1Blocks(size_t n, double mean, double cv, double phi, uint64_t seed) {
  assert(std::abs(phi) < 1.0 && cv >= 0.0);
  Rng rng(seed);
  std::vector<double> out(n);
  const double innovation = std::sqrt(1.0 - phi * phi) * cv;
  double e = cv * rng.Normal();
  for (size_t t = 0; t < n; ++t) {
    if (t > 0) e = phi * e + innovation * rng.Normal();
    out[t] = mean * (1.0 + e);
  }
  return out;
}

namespace {

// One simulated pilot's arms from the joined baseline.
void DrawPilot(const std::vector<double>& joined, int64_t per_arm, double effect_frac, Rng& rng,
               std::vector<double>& controlled, std::vector<double>& uncontrolled) {
  controlled.clear();
  uncontrolled.clear();
  const size_t start = static_cast<size_t>(rng.Index(joined.size()));
  for (int64_t p = 0; p < per_arm; ++p) {
    const bool controlled_first = rng.Index(2) == 0;
    for (int64_t j = 0; j < 2; ++j) {
      const double v = joined[(start + static_cast<size_t>(2 * p + j)) % joined.size()];
      if ((j == 0) == controlled_first) {
        controlled.push_back(v * (1.0 + effect_frac));
      } else {
        uncontrolled.push_back(v);
      }
    }
  }
}

}  // namespace

SimulationResult SimulatePilots(const std::vector<std::vector<double>>& baseline,
                                const SimulationOptions& options) {
  std::vector<double> joined;
  for (const auto& s : baseline) joined.insert(joined.end(), s.begin(), s.end());
  assert(options.blocks_per_arm >= 2 &&
         static_cast<int64_t>(joined.size()) >= 2 * options.blocks_per_arm);
  SimulationResult r;
  r.pilots = options.pilots;
  r.blocks_per_arm = options.blocks_per_arm;
  Rng rng(options.seed);
  std::vector<double> c, u;
  const double truth_pct = 100.0 * options.effect_frac;
  for (int i = 0; i < options.pilots; ++i) {
    EffectOptions eo = options.effect;
    eo.seed = rng.Next();
    DrawPilot(joined, options.blocks_per_arm, options.effect_frac, rng, c, u);
    const Effect with = EstimateEffect(c, u, eo);
    if (with.interval.effect_lo_pct && *with.interval.effect_lo_pct <= truth_pct &&
        truth_pct <= *with.interval.effect_hi_pct) {
      ++r.covered;
    }
    if (!with.interval.effect_lo_pct) ++r.undefined;
    if (with.significant) ++r.detected;

    eo.seed = rng.Next();
    DrawPilot(joined, options.blocks_per_arm, 0.0, rng, c, u);
    const Effect without = EstimateEffect(c, u, eo);
    if (without.significant) ++r.null_significant;
    if (without.interval.effect_lo_pct && *without.interval.effect_lo_pct <= 0.0 &&
        0.0 <= *without.interval.effect_hi_pct) {
      ++r.null_covered;
    }
  }
  return r;
}

Interval WilsonInterval(int k, int n, double alpha) {
  if (n <= 0) return {};
  const double z = NormalQuantile(1.0 - alpha / 2.0);
  const double nd = n;
  const double p = k / nd;
  const double denom = 1.0 + z * z / nd;
  const double centre = (p + z * z / (2.0 * nd)) / denom;
  const double half = z * std::sqrt(p * (1.0 - p) / nd + z * z / (4.0 * nd * nd)) / denom;
  return {std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

}  // namespace headroom::pilot
