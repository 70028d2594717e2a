// `headroom pilot plan`: the design of a site pilot (docs/PILOT.md) -- alternating blocks,
// controlled and uncontrolled in a random order within each pair, sized from the baseline's
// block statistics to detect a relative effect, and what it costs.
//
// Pure: block values in, a plan out; the order of the arms comes from the seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "pilot/blocks.h"
#include "pilot/statistics.h"

namespace headroom::pilot {

// Fewer baseline blocks than this and the block variance is not worth estimating.
inline constexpr size_t kMinBaselineBlocks = 8;
// A lag-1 autocorrelation above this means the blocks are too short to be independent.
inline constexpr double kLargeAutocorrelation = 0.3;
// The price of a GPU-hour, default (docs/PILOT.md, "Cost"): a round figure near 2024-25
// on-demand list prices of an H100 at specialist clouds.
inline constexpr double kDefaultUsdPerGpuHour = 3.0;

struct PlanOptions {
  Metric metric = Metric::kEnergy;
  double window_s = 0.5;     // violations: the window
  double effect_frac = 0.1;  // relative effect to detect; 0.1 = 10 %
  double alpha = 0.05;
  double power = 0.8;
  double block_s = 86400.0;
  uint32_t gpus = 1;  // GPUs under the controller during the pilot
  double usd_per_gpu_hour = kDefaultUsdPerGpuHour;
  uint64_t seed = 1;
};

enum class Arm { kControlled, kUncontrolled };
std::string_view ArmName(Arm arm);

struct ScheduledBlock {
  int64_t index = 0;  // 0, 1, ...
  double start_s = 0.0;
  Arm arm = Arm::kControlled;
};

struct PilotPlan {
  PlanOptions options;
  size_t baseline_blocks = 0;
  double baseline_mean = 0.0;
  double baseline_sd = 0.0;
  double autocorrelation_lag1 = 0.0;
  SampleSize size;
  int64_t blocks = 0;  // both arms
  double days = 0.0;
  double gpu_hours_at_risk = 0.0;  // the controlled arm's
  double cost_usd = 0.0;
  std::vector<ScheduledBlock> schedule;  // the first kMaxScheduledBlocks blocks
  bool schedule_truncated = false;
  std::vector<std::string> advice;  // one line each
};
inline constexpr int64_t kMaxScheduledBlocks = 10000;

// `baseline`: per trace, its block values in time order (CutIntoBlocks, then Value).
// Fails with one line when there are fewer than kMinBaselineBlocks blocks or the baseline mean
// is 0 (a relative effect on 0 is 0).
// REQUIRES: options within their documented ranges.
Result<PilotPlan> PlanPilot(const std::vector<std::vector<double>>& baseline,
                            const PlanOptions& options);

// The order of the arms: pair p holds blocks 2p and 2p + 1, one of each arm, controlled first
// with probability 1/2 (seeded).
std::vector<ScheduledBlock> AlternatingSchedule(int64_t pairs, double block_s, uint64_t seed,
                                                int64_t max_blocks = kMaxScheduledBlocks);

}  // namespace headroom::pilot
