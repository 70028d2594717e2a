// Checkpoint selection (`headroom train --select-checkpoints K`): a training run hands over K
// snapshots from its last half (sim/train.h); each is scored on validation episodes -- seeds
// kValidationSeed0.. (2001, ...), apart from the evaluation seeds (1, ...) and the searches'
// calibration seeds (1001, ...) -- at the scenario's default budget and under the
// demand-response schedule, as `eval` scores them, beside the baselines a user would otherwise
// run there (static-safe, or static-safe-lowest under the schedule; power-cap; pid), scored on
// the same validation episodes. The run keeps, among the snapshots whose violation fraction in
// the policy's cost window is within its target under both budgets, the one that dominates the
// most baselines (at least their tokens, no more violations), then the most tokens; when no
// snapshot is within the target, the one with the fewest violations. PPO's last iterations
// still move the policy, and a constraint met on average over training is not met by every
// snapshot: a seed that ends on a bad update ships the good snapshot before it. The evaluation
// seeds are never seen.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "control/policy.h"
#include "twin/scenario.h"

namespace headroom::sim {

// What one controller did on the validation episodes under one budget.
struct ValidationScore {
  double tokens = 0.0;              // mean per episode
  double violation_fraction = 0.0;  // mean, in the policy's cost window
};

// The budgets of validation: the scenario's default, and demand-response around the top of its
// range (as `eval --budget-schedule demand-response`).
inline constexpr std::array<std::string_view, 2> kValidationBudgets = {"default",
                                                                       "demand-response"};

struct ValidationBaseline {
  std::string name;
  size_t budget = 0;  // index into kValidationBudgets
  ValidationScore score;
};

struct CheckpointScore {
  long long timesteps = 0;
  std::array<ValidationScore, kValidationBudgets.size()> budgets{};
  int dominated = 0;                  // baselines (name and budget) it dominates
  double tokens() const;              // the budgets' means added
  double violation_fraction() const;  // the worse budget's
};

// The index of the snapshot kept (above); ties go to the later snapshot. REQUIRES: non-empty.
size_t SelectCheckpoint(std::span<const CheckpointScore> scores, double violation_target);

// a dominates b: at least its tokens and no more violations.
bool Dominates(const ValidationScore& a, const ValidationScore& b);

struct ValidationConfig {
  int seeds = 4;
  int steps = 100;  // eval's --steps (horizon `time`)
  int threads = 1;
};

// The baselines on the validation episodes. PID is tuned to `policy`'s constraint, as in `eval`
// (any snapshot of the run: they share it). The policy's cost window must be one of eval's
// scoring windows (0.5, 30 or 300 s).
Result<std::vector<ValidationBaseline>> ValidateBaselines(const twin::Scenario& scenario,
                                                          const control::Policy& policy,
                                                          const ValidationConfig& config);

// One snapshot on the validation episodes, against the baselines.
Result<CheckpointScore> ValidateCheckpoint(const twin::Scenario& scenario,
                                           const control::Policy& policy, long long timesteps,
                                           std::span<const ValidationBaseline> baselines,
                                           const ValidationConfig& config);

}  // namespace headroom::sim
