// `headroom train`: the PPO meta-controller trained in the twin.
//
// Environments: `envs` twins side by side, each an episode of `episode_intervals` control
// intervals cut from an endless job (the value is bootstrapped at the cut; see rl_train/gae.h),
// then a fresh job with new domain randomisation: the budget uniform in the scenario's training
// range, decode power x U(0.96, 1.04), compute-phase power x U(0.97, 1.03), median completion
// length x U(0.8, 1.25), telemetry noise x U(0.5, 1.5), and a random start within the first steps.
// With several scenarios each episode picks one at random. In a share of the episodes
// (moving_budget_fraction) the budget moves: a new level uniform in the range every U(60, 300)
// s, so that one policy follows budgets that change (steps, walks and demand-response drops
// alike); the features stay budget-relative. The intervals within the shield's settle_s after a
// decrease carry their cost in the reward but are left out of the violation rate the multiplier
// follows (the shield brings the power down there; counting them would grow the multiplier with
// how often the budget falls).
//
// Reward per interval: tokens / (the scenario's uncontrolled tokens per interval) - lambda x cost,
// cost = 1 when the true job power, averaged over the trailing cost window (default: the 0.5 s
// interval itself), is above the budget in force for the interval. The
// multiplier lambda follows a PI-Lagrangian (Stooke et al. 2020) on the batch's violation rate
// relative to the target, so that it moves as fast down as up:
//   e = clamp((rate - target) / target, -1, 4),  I = clamp(I + ki e, 0, max),
//   lambda = clamp(I + kp e, 0, max).
// The cap (lagrange_max) keeps a target the actuators cannot meet -- a compute phase above the
// budget, which no generation setting can lower -- from driving the policy to the floor.
// The shield (control/baselines.h) is part of the environment during training, as in use.
// Deterministic for a seed (one thread).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "control/baselines.h"
#include "control/policy.h"
#include "rl_train/ppo.h"
#include "twin/scenario.h"

namespace headroom::sim {

struct TrainConfig {
  std::vector<twin::Scenario> scenarios;
  // Budget range per scenario (per GPU); empty: each scenario's own range.
  std::vector<std::pair<double, double>> budget_ranges_w;
  long long timesteps = 300000;
  uint64_t seed = 1;
  int envs = 16;
  int steps_per_env = 256;
  int episode_intervals = 600;
  double moving_budget_fraction = 0.25;
  std::vector<int> hidden = {64, 64};
  rl::PpoConfig ppo;
  double gamma = 0.99;
  double gae_lambda = 0.95;
  double violation_target = 0.01;
  // The cost of an interval: its trailing mean job power over this window (0.5 s: the interval
  // itself) above the budget. 30 s scores like the paper's 72B runs.
  double cost_window_s = 0.5;
  bool group_size_only = false;   // concurrency stays at the trainer's default
  bool fixed_group_size = false;  // group size stays at the trainer's default
  // Randomise each episode over a wide family around its scenario (decode power and speed, the
  // update's power and length, completion lengths, noise) instead of small perturbations.
  bool family = false;
  double lagrange_kp = 0.5;
  double lagrange_ki = 0.15;
  double lagrange_init = 1.0;
  double lagrange_max = 30.0;
  control::ShieldRule shield;
  // Checkpoints handed to `checkpoint` (0: none): evenly spaced over the last half of training,
  // the last at the end. What is done with them (checkpoint selection) is the caller's.
  int checkpoints = 0;
};

struct IterationLog {
  int iteration = 0;
  long long timesteps = 0;
  double steps_per_s = 0.0;
  double mean_reward = 0.0;     // per interval, with the penalty
  double mean_tokens = 0.0;     // the token part of the reward, per interval
  double violation_rate = 0.0;  // intervals over budget / intervals
  double approx_kl = 0.0;
  double clip_fraction = 0.0;
  double explained_variance = 0.0;
  double entropy = 0.0;
  double multiplier = 0.0;
};

// Which iterations (1-based) of `iterations` are checkpoints: `checkpoints` of them evenly
// spaced over the last half, the last iteration always among them; ascending, no repeats.
std::vector<int> CheckpointIterations(int iterations, int checkpoints);

// `now_s` is the injected clock (seconds, monotonic) for steps/s; `log` is called per iteration;
// `checkpoint` with the policy as it stands at each of CheckpointIterations (complete: it can be
// written or evaluated as the returned one). The returned policy is the last.
control::Policy Train(
    const TrainConfig& config, const std::function<double()>& now_s,
    const std::function<void(const IterationLog&)>& log,
    const std::function<void(const control::Policy&, long long timesteps)>& checkpoint = {});

}  // namespace headroom::sim
