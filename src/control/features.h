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
// Actions: a move of the concurrency on a grid of kConcurrencyLevels levels spread on log2 of its
// range (kConcurrencyMoves: -2, -1, 0, +1, +2 levels from the level nearest to the concurrency in
// force: exploration stays local, so it does not itself cause violations), and a group size level
// (kGroupLevels, spread linearly; an absolute target, applied at the next step).
#pragma once

#include <array>
#include <string_view>

#include "control/actuators.h"
#include "control/controller.h"

namespace headroom::control {

inline constexpr int kHistory = 5;
inline constexpr int kFeatureCount = kHistory + 1 + kPhaseCount + 5;
inline constexpr int kConcurrencyLevels = 9;
inline constexpr int kConcurrencyMoves = 5;
inline constexpr int kGroupLevels = 5;

extern const std::array<std::string_view, kFeatureCount> kFeatureNames;

// Level i of n on log2 of the range, rounded.
int ConcurrencyAtLevel(const Range& range, int level, int levels = kConcurrencyLevels);
// The level whose concurrency is nearest to c on log2.
int NearestConcurrencyLevel(const Range& range, int c, int levels = kConcurrencyLevels);
// Level i of n spread linearly over the range, rounded.
int GroupAtLevel(const Range& range, int level, int levels = kGroupLevels);

class FeatureState {
 public:
  void Reset() { filled_ = 0; }
  // Writes kFeatureCount values and pushes this interval's headroom into the history.
  void Compute(const Inputs& in, const ActuatorLimits& limits, double* out);

 private:
  std::array<double, kHistory> history_{};  // [0] newest
  int filled_ = 0;
};

}  // namespace headroom::control
