// What a learned controller sees, and what its discrete actions mean.
//
// Features (kFeatureNames, in order), all from Inputs — nothing a live agent would not know:
//   headroom_0..4   smoothed job power per GPU per GPU / budget - 1, now and the 4 intervals before
//   trend           headroom_0 - headroom_1
//   phase_*         one-hot of the reported phase (8, common/phase.h)
//   progress        rollout progress (finished / all sequences of this step)
//   concurrency     position of the concurrency in force on log2 of its range, in [0, 1]
//   group_size      position of this step's group size in its range, in [0, 1]
//   next_group_size position of the next step's group size
//   budget          budget / nameplate
//   power_limit     the power limit in force / nameplate (1: none)
//   update_headroom the last update's (log-prob and train phases) mean job power per GPU /
//                   budget - 1: whether the update alone is above the budget (0 before one)
//   rollout_slope   how the job's power responds to concurrency in rollout: the slope of power /
//                   budget on log2 concurrency, a regression over recent rollout intervals
//                   (exponential forgetting), clamped to [-1, 1]; 0 until concurrency has moved
// The last two tell a policy where its authority lies (issue 18's universal policy).
// Actions: a move of the concurrency on a grid of kConcurrencyLevels levels spread on log2 of its
// range (kConcurrencyMoves: -2, -1, 0, +1, +2 levels from the level nearest to the concurrency in
// force: exploration stays local, so it does not itself cause violations), and a group size level
// (kGroupLevels, spread linearly; an absolute target, applied at the next step), and a power limit
// level (kPowerLimitLevels: none, or kPowerLimitFractions x the budget per GPU; hybrid
// actuation, docs/CONTROL.md).
#pragma once

#include <array>
#include <string_view>

#include "control/actuators.h"
#include "control/controller.h"

namespace headroom::control {

inline constexpr int kHistory = 5;
inline constexpr int kFeatureCount = kHistory + 1 + kPhaseCount + 8;
inline constexpr int kConcurrencyLevels = 9;
inline constexpr int kConcurrencyMoves = 5;
inline constexpr int kGroupLevels = 5;
inline constexpr int kPowerLimitLevels = 5;
// Level k > 0 of the power-limit head: the budget per GPU x this (level 0: no limit).
inline constexpr std::array<double, kPowerLimitLevels> kPowerLimitFractions = {0.0, 1.0, 0.96, 0.92,
                                                                               0.86};
inline constexpr int kActionHeads = 3;

extern const std::array<std::string_view, kFeatureCount> kFeatureNames;

// Level i of n on log2 of the range, rounded.
int ConcurrencyAtLevel(const Range& range, int level, int levels = kConcurrencyLevels);
// The level whose concurrency is nearest to c on log2.
int NearestConcurrencyLevel(const Range& range, int c, int levels = kConcurrencyLevels);
// Level i of n spread linearly over the range, rounded.
int GroupAtLevel(const Range& range, int level, int levels = kGroupLevels);

class FeatureState {
 public:
  void Reset();
  // Writes kFeatureCount values and pushes this interval's headroom into the history.
  void Compute(const Inputs& in, const ActuatorLimits& limits, double* out);

 private:
  std::array<double, kHistory> history_{};  // [0] newest
  int filled_ = 0;
  // The update under way (log-prob and train intervals) and the last one's mean power.
  double update_sum_w_ = 0.0;
  int update_n_ = 0;
  double last_update_w_ = 0.0;  // 0: none seen
  // Rollout regression of power / budget on log2 concurrency: weighted sums.
  double s_ = 0.0, sx_ = 0.0, sy_ = 0.0, sxx_ = 0.0, sxy_ = 0.0;
};

}  // namespace headroom::control
