#include "twin/environment.h"

#include <gtest/gtest.h>

#include "twin_test_util.h"

namespace headroom::twin {
namespace {

TEST(Environment, StepsOneControlIntervalAndReportsWhatAnAgentSees) {
  auto s = ParseScenario(testing::TinyScenario(), "tiny.toml");
  ASSERT_TRUE(s.ok());
  Environment env(*s, 300.0);
  EXPECT_EQ(env.ticks_per_interval(), 5);  // 0.5 s of 0.1 s ticks
  const Observation o = env.Reset(1);
  EXPECT_EQ(o.t_s, 0.0);
  EXPECT_EQ(o.smoothed_power_w.size(), 1u);
  EXPECT_EQ(o.concurrency, 8);
  EXPECT_EQ(o.budget_w, 300.0);
  Actuation a;
  a.concurrency = 2;
  a.group_size = 99;  // clamped to 16, next step
  a.power_limit_w = 250.0;
  const auto r = env.Step(a);
  EXPECT_DOUBLE_EQ(r.observation.t_s, 0.5);
  EXPECT_EQ(r.observation.concurrency, 2);
  EXPECT_EQ(r.observation.group_size, 4);
  EXPECT_EQ(r.observation.next_group_size, 16);
  EXPECT_EQ(r.observation.power_limit_w, 250.0);
  ASSERT_EQ(r.metrics.tick_power_w.size(), 5u);
  double energy = 0.0, mean = 0.0;
  for (double p : r.metrics.tick_power_w) {
    energy += p * 0.1;
    mean += p / 5.0;
  }
  EXPECT_NEAR(r.metrics.energy_j, energy, 1e-9);
  EXPECT_NEAR(r.metrics.mean_power_w[0], mean, 1e-9);
  EXPECT_EQ(r.metrics.phase, Phase::kRollout);
  EXPECT_GT(r.metrics.tokens, 0.0);
}

TEST(Environment, ResetWithTheSameSeedReplays) {
  auto s = LoadScenario("a100-7b-tp1");
  ASSERT_TRUE(s.ok());
  Environment env(*s, s->budget_w);
  const auto run = [&] {
    env.Reset(9);
    std::vector<double> p;
    for (int i = 0; i < 200; ++i) {
      const auto r = env.Step({});
      p.insert(p.end(), r.metrics.tick_power_w.begin(), r.metrics.tick_power_w.end());
    }
    return p;
  };
  EXPECT_EQ(run(), run());
}

}  // namespace
}  // namespace headroom::twin
