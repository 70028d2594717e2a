#include "trace/synthetic.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <vector>

namespace headroom::trace {
namespace {

// Shape constants, as fractions of nameplate. Illustrative, not calibrated.
constexpr double kIdleFraction = 0.21;        // idle with the model loaded
constexpr double kDecodeFullFraction = 0.78;  // decode at full occupancy
constexpr double kTrainFraction = 0.92;       // forward/backward plateau
constexpr double kSyncFraction = 0.35;        // weight sync
constexpr double kRippleFraction = 0.06;      // micro-batch ripple in the update phase
constexpr double kRippleHz = 0.8;
constexpr double kNoiseFraction = 0.02;  // AR(1) noise standard deviation
constexpr double kNoiseRho = 0.9;        // AR(1) coefficient per sample
constexpr double kRolloutMeanS = 40.0;
constexpr double kTrainMeanS = 18.0;
constexpr double kSyncS = 3.0;
constexpr double kPeakTokensPerS = 2400.0;  // per GPU, at full occupancy

}  // namespace

void GenerateSyntheticTrace(const SyntheticSpec& spec,
                            const std::function<void(const SyntheticSample&)>& emit) {
  std::mt19937_64 rng(spec.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.8, 1.2);
  const double pn = spec.nameplate_w;
  std::vector<double> noise(spec.gpus, 0.0);
  const double innovation = kNoiseFraction * pn * std::sqrt(1.0 - kNoiseRho * kNoiseRho);

  double step_start_s = 0.0;
  double rollout_s = kRolloutMeanS * uniform(rng);
  double train_s = kTrainMeanS * uniform(rng);
  double step = 0.0;
  const auto ticks = static_cast<uint64_t>(std::floor(spec.duration_s / spec.interval_s));
  for (uint64_t i = 0; i <= ticks; ++i) {
    // Rounded to the microsecond so that the written trace reads "0.3", not "0.30000000000000004".
    const double t_s = std::round(static_cast<double>(i) * spec.interval_s * 1e6) / 1e6;
    if (t_s >= step_start_s + rollout_s + train_s + kSyncS) {
      step_start_s += rollout_s + train_s + kSyncS;
      rollout_s = kRolloutMeanS * uniform(rng);
      train_s = kTrainMeanS * uniform(rng);
      step += 1.0;
    }
    const double in_step_s = t_s - step_start_s;
    std::string_view phase;
    double level_w = 0.0;
    double occupancy = 0.0;
    if (in_step_s < rollout_s) {
      phase = "rollout";
      // Occupancy stays full for 60 % of the rollout, then stragglers finish one by one.
      const double x = in_step_s / rollout_s;
      occupancy = x < 0.6 ? 1.0 : std::max(0.02, std::pow(1.0 - (x - 0.6) / 0.4, 2.0));
      level_w = pn * (kIdleFraction + (kDecodeFullFraction - kIdleFraction) * std::sqrt(occupancy));
    } else if (in_step_s < rollout_s + train_s) {
      phase = "train";
      level_w = pn * (kTrainFraction +
                      kRippleFraction * std::sin(2.0 * std::numbers::pi * kRippleHz * t_s));
    } else {
      phase = "sync";
      level_w = pn * kSyncFraction;
    }
    for (uint32_t g = 0; g < spec.gpus; ++g) {
      noise[g] = kNoiseRho * noise[g] + innovation * normal(rng);
      const double power_w = std::clamp(level_w + noise[g], 0.0, 1.05 * pn);
      const double tokens = phase == "rollout" && i > 0
                                ? std::round(kPeakTokensPerS * occupancy * spec.interval_s)
                                : 0.0;
      emit(SyntheticSample{t_s, g, std::round(power_w * 100.0) / 100.0, phase, step, tokens});
    }
  }
}

}  // namespace headroom::trace
