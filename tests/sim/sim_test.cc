#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "control/baselines.h"
#include "sim/episode.h"
#include "sim/evaluate.h"
#include "sim/train.h"
#include "twin/scenario.h"

namespace headroom::sim {
namespace {

twin::Scenario Load(const char* name) {
  auto s = twin::LoadScenario(name);
  EXPECT_TRUE(s.ok());
  return *s;
}

// With 0.1 s ticks and 0.5 s intervals from t = 0, every 0.5 s window is one interval: the
// violation fraction at 0.5 s must be the share of recorded interval means above the budget.
TEST(Episode, HalfSecondViolationsAreTheIntervalsOverBudget) {
  const twin::Scenario s = Load("a100-7b-tp1");
  control::Uncontrolled u(s.concurrency, s.group_size);
  EpisodeOptions o;
  o.steps = 3;
  o.record_power = true;
  const EpisodeResult r = RunEpisode(s, 300.0, 7, u, o);
  ASSERT_GT(r.power_w.size(), 100u);
  size_t over = 0;
  for (float p : r.power_w) over += p > 300.0f ? 1 : 0;
  EXPECT_EQ(r.windows[0], r.power_w.size());
  EXPECT_NEAR(r.violation_fraction[0], double(over) / r.power_w.size(), 1e-12);
  EXPECT_EQ(r.steps_done, 3);
  EXPECT_NEAR(r.duration_s, r.power_w.size() * 0.5, 1e-9);
  double mean_w = 0.0;
  for (float p : r.power_w) mean_w += p / r.power_w.size();
  EXPECT_NEAR(r.energy_j, mean_w * r.duration_s, 1e-3 * r.energy_j);
  EXPECT_GT(r.tokens, 0.0);
}

TEST(Episode, SameSeedSameResult) {
  const twin::Scenario s = Load("a100-72b-tp4");
  control::Pid a({2.0, 1.0, 0.05}, {2, 8}, 8, 8), b({2.0, 1.0, 0.05}, {2, 8}, 8, 8);
  EpisodeOptions o;
  o.horizon_s = 120.0;
  const EpisodeResult x = RunEpisode(s, 149.8, 3, a, o), y = RunEpisode(s, 149.8, 3, b, o);
  EXPECT_EQ(x.tokens, y.tokens);
  EXPECT_EQ(x.energy_j, y.energy_j);
}

TEST(Evaluate, ComparesOnTheSameHorizonAndChecksNames) {
  EvalConfig c;
  c.scenario = Load("a100-7b-tp1");
  c.budget_w = 314.6;
  c.seeds = 2;
  c.steps = 4;
  c.search_steps = 4;
  c.calibration_seeds = 1;
  c.controllers = {"uncontrolled", "static-safe", "power-cap"};
  auto r = Evaluate(c);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(r->controllers.size(), 3u);
  EXPECT_EQ(*r->controllers[0].tokens_vs_uncontrolled_pct, 0.0);
  EXPECT_EQ(*r->controllers[1].tokens_vs_static_safe_pct, 0.0);
  // Every controller runs exactly the uncontrolled time of 4 steps on each seed.
  for (const auto& e : r->controllers) {
    for (int i = 0; i < 2; ++i) EXPECT_NEAR(e.runs[i].duration_s, r->horizon_s[i], 0.5);
  }
  EXPECT_EQ(r->controllers[0].runs[0].steps_done, 4);
  c.controllers = {"uncontrolled", "bang-bang"};
  auto bad = Evaluate(c);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error().message(), ::testing::HasSubstr("unknown controller 'bang-bang'"));
  c.controllers = {"ppo"};
  EXPECT_FALSE(Evaluate(c).ok());  // no policy
}

TEST(StaticSafe, PicksTheMostTokensWithinTheTarget) {
  const twin::Scenario s = Load("a100-72b-tp4");
  // A budget above every setting's power: the largest concurrency wins. Below even the pause
  // between batches: none meets the target, all tie at 100 % and the most tokens win the tie.
  const StaticSafe high = SearchStaticSafe(s, 170.0, 0.01, 1, 2, 2);
  EXPECT_TRUE(high.meets_target);
  EXPECT_EQ(high.concurrency, 8);
  const StaticSafe low = SearchStaticSafe(s, 60.0, 0.01, 1, 2, 2);
  EXPECT_FALSE(low.meets_target);
  EXPECT_EQ(low.violation_fraction, 1.0);
  EXPECT_EQ(low.concurrency, 8);
}

TEST(Train, TwoIterationSmokeIsDeterministic) {
  TrainConfig c;
  c.scenarios = {Load("a100-7b-tp1")};
  c.envs = 2;
  c.steps_per_env = 64;
  c.timesteps = 256;
  c.hidden = {16};
  c.ppo.minibatch = 32;
  c.ppo.epochs = 2;
  int iterations = 0;
  IterationLog last;
  auto clock = [] { return 0.0; };
  const control::Policy a = Train(c, clock, [&](const IterationLog& l) {
    ++iterations;
    last = l;
  });
  EXPECT_EQ(iterations, 2);
  EXPECT_EQ(last.timesteps, 256);
  EXPECT_TRUE(std::isfinite(last.approx_kl));
  EXPECT_GE(last.violation_rate, 0.0);
  EXPECT_LE(last.violation_rate, 1.0);
  EXPECT_GT(last.entropy, 0.0);
  const control::Policy b = Train(c, clock, nullptr);
  EXPECT_TRUE(a.net.actor().Parameters().isApprox(b.net.actor().Parameters(), 0.0));
  EXPECT_EQ(a.trained_on, std::vector<std::string>{"a100-7b-tp1"});
}

}  // namespace
}  // namespace headroom::sim
