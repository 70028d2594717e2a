#include "sim/checkpoint_select.h"

#include <gtest/gtest.h>

#include <vector>

#include "sim/evaluate.h"
#include "sim/train.h"
#include "twin/scenario.h"

namespace headroom::sim {
namespace {

TEST(CheckpointIterations, EvenlyOverTheLastHalfEndingAtTheLast) {
  // 100 iterations, 5 checkpoints: the last half is 50 iterations, a quarter of it apart.
  EXPECT_EQ(CheckpointIterations(100, 5), (std::vector<int>{50, 63, 75, 88, 100}));
  EXPECT_EQ(CheckpointIterations(100, 1), (std::vector<int>{100}));
  EXPECT_EQ(CheckpointIterations(100, 0), std::vector<int>{});
  // More checkpoints than iterations in the last half: each iteration once.
  EXPECT_EQ(CheckpointIterations(4, 8), (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(CheckpointIterations(1, 3), (std::vector<int>{1}));
}

CheckpointScore Score(double tokens, double violations, int dominated) {
  CheckpointScore s;
  s.budgets[0] = {tokens, violations};
  s.budgets[1] = {tokens, violations / 2};  // the worse budget is the first
  s.dominated = dominated;
  return s;
}

TEST(SelectCheckpoint, WithinTheTargetTheMostDominatedThenTheMostTokens) {
  const double target = 0.003;
  // 1 has the most tokens but is over the target; 2 and 3 dominate as many baselines, 3 has
  // more tokens; 0 is within the target with more tokens than both but dominates fewer.
  std::vector<CheckpointScore> s = {Score(100, 0.001, 4), Score(200, 0.004, 6), Score(90, 0.002, 6),
                                    Score(95, 0.0029, 6)};
  EXPECT_EQ(SelectCheckpoint(s, target), 3u);
  // A tie in every key goes to the later snapshot.
  s.push_back(Score(95, 0.0029, 6));
  EXPECT_EQ(SelectCheckpoint(s, target), 4u);
  // At the target counts as within it.
  EXPECT_EQ(SelectCheckpoint(std::vector<CheckpointScore>{Score(10, 0.004, 0), Score(5, 0.003, 0)},
                             target),
            1u);
}

TEST(SelectCheckpoint, NoneWithinTheTargetTheFewestViolations) {
  const std::vector<CheckpointScore> s = {Score(100, 0.02, 6), Score(50, 0.01, 0),
                                          Score(60, 0.015, 3)};
  EXPECT_EQ(SelectCheckpoint(s, 0.003), 1u);
  EXPECT_EQ(SelectCheckpoint(std::vector<CheckpointScore>{Score(1, 1.0, 0)}, 0.003), 0u);
}

TEST(Dominates, AtLeastTheTokensAndNoMoreViolations) {
  EXPECT_TRUE(Dominates({10, 0.01}, {10, 0.01}));
  EXPECT_TRUE(Dominates({11, 0.0}, {10, 0.01}));
  EXPECT_FALSE(Dominates({9.99, 0.0}, {10, 0.01}));
  EXPECT_FALSE(Dominates({11, 0.011}, {10, 0.01}));
}

// Train hands over complete snapshots at the checkpoints; the validation scores them on seeds
// 2001.. as `eval` would (checked against an Evaluate of the same snapshot on those seeds).
TEST(CheckpointSelection, SnapshotsAreScoredOnTheValidationSeedsAsEvalScoresThem) {
  auto scenario = twin::LoadScenario("h100-70b-tp4");
  ASSERT_TRUE(scenario.ok());
  TrainConfig c;
  c.scenarios = {*scenario};
  c.envs = 2;
  c.steps_per_env = 64;
  c.timesteps = 512;
  c.hidden = {16};
  c.ppo.minibatch = 32;
  c.ppo.epochs = 1;
  c.violation_target = 0.003;
  c.checkpoints = 2;
  std::vector<control::Policy> snapshots;
  std::vector<long long> at;
  const control::Policy last = Train(
      c, [] { return 0.0; }, nullptr,
      [&](const control::Policy& p, long long t) {
        snapshots.push_back(p);
        at.push_back(t);
      });
  // 4 iterations of 128: the checkpoints are iterations 2 and 4.
  ASSERT_EQ(at, (std::vector<long long>{256, 512}));
  EXPECT_TRUE(
      snapshots.back().net.actor().Parameters().isApprox(last.net.actor().Parameters(), 0.0));
  EXPECT_EQ(snapshots.front().timesteps, 256);
  EXPECT_EQ(snapshots.front().trained_on, std::vector<std::string>{"h100-70b-tp4"});
  EXPECT_DOUBLE_EQ(snapshots.front().violation_target, 0.003);

  const ValidationConfig v{2, 5, 1};
  auto baselines = ValidateBaselines(*scenario, snapshots.front(), v);
  ASSERT_TRUE(baselines.ok()) << baselines.error().message();
  ASSERT_EQ(baselines->size(), 6u);
  auto score = ValidateCheckpoint(*scenario, snapshots.front(), 256, *baselines, v);
  ASSERT_TRUE(score.ok()) << score.error().message();

  EvalConfig e;
  e.scenario = *scenario;
  e.seeds = 2;
  e.first_seed = kValidationSeed0;
  e.steps = 5;
  e.controllers = {"ppo", "pid"};
  e.policy = &snapshots.front();
  e.violation_target = 0.003;
  e.threads = 1;
  e.budget_w = scenario->budget_w;
  auto r = Evaluate(e);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(score->budgets[0].tokens, r->controllers[0].tokens.mean);
  EXPECT_DOUBLE_EQ(score->budgets[0].violation_fraction,
                   r->controllers[0].violation_fraction[0].mean);
  // PID on the same seeds, tuned to the policy's constraint.
  EXPECT_EQ((*baselines)[2].name, "pid");
  EXPECT_DOUBLE_EQ((*baselines)[2].score.tokens, r->controllers[1].tokens.mean);
  int dominated = 0;
  for (const ValidationBaseline& b : *baselines) {
    dominated += Dominates(score->budgets[b.budget], b.score) ? 1 : 0;
  }
  EXPECT_EQ(score->dominated, dominated);

  // A cost window eval does not score in is refused.
  control::Policy odd = snapshots.front();
  odd.cost_window_s = 7.0;
  EXPECT_FALSE(ValidateBaselines(*scenario, odd, v).ok());
}

}  // namespace
}  // namespace headroom::sim
