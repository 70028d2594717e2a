#include "twin_link/twin_link.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/runner.h"
#include "control/baselines.h"
#include "twin/scenario.h"

namespace headroom::sim {
namespace {

TEST(TwinLink, AdvancesToTheClockAndTakesActuation) {
  auto sc = twin::LoadScenario("a100-7b-tp1");
  ASSERT_TRUE(sc.ok());
  TwinLink s(*sc, 1);
  auto r = s.Read(10.0);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(s.twin().t_s(), 10.0, 1e-9);
  EXPECT_EQ(*r->gpus[0].power_w, s.twin().smoothed_w()[0]);
  agent::Actuation a;
  a.concurrency = 4;
  a.group_size = 8;
  s.Apply(a);
  EXPECT_EQ(s.twin().concurrency(), 4);
  a.concurrency = 1000;
  s.Apply(a);
  EXPECT_EQ(s.twin().concurrency(), 16);  // clamped to the scenario's range
  ASSERT_TRUE(s.Read(10.0).ok());
  EXPECT_NEAR(s.twin().t_s(), 10.0, 1e-9);  // no time passes
  const agent::TrainerReport report = s.Report(10.0);
  EXPECT_EQ(report.step, s.twin().steps_done());
  EXPECT_EQ(report.tokens, s.twin().tokens_total());
  EXPECT_EQ(report.group_size, s.twin().group_size());
  const agent::TrainerState state = s.State();
  EXPECT_EQ(state.phase, twin::PhaseName(s.twin().phase()));
}

agent::AgentConfig Config() {
  agent::AgentConfig c;
  c.budget_w = 300.0;
  c.limits.concurrency = {1, 16};
  c.limits.group_size = {4, 16};
  c.safe_concurrency = 1;
  c.safe_group_size = 4;
  return c;
}

TEST(TwinLink, TheAgentsRunnerDrivesTheTwinWithItsDecisions) {
  auto sc = twin::LoadScenario("a100-7b-tp1");
  ASSERT_TRUE(sc.ok());
  TwinLink twin(*sc, 3);
  control::Static fixed("static", 5, 12);
  agent::Agent core(Config(), fixed);
  agent::Shared shared;
  shared.agent = &core;
  shared.now_s = [] { return 0.0; };
  agent::Clock clock{[](double) {}};
  std::atomic<bool> stop{false};
  agent::RunnerOptions o;
  o.duration_s = 120.0;
  agent::Run(twin, &twin, shared, nullptr, o, clock, stop, [](const std::string&) {});
  EXPECT_EQ(twin.twin().concurrency(), 5);
  EXPECT_EQ(twin.twin().next_group_size(), 12);
  EXPECT_GT(twin.twin().steps_done(), 0);
  EXPECT_NEAR(twin.twin().t_s(), 120.0, 1e-9);
  // The twin reported its phase and tokens as a trainer would.
  ASSERT_TRUE(core.Status(120.0).report.has_value());
  EXPECT_GT(core.Status(120.0).report->tokens, 0.0);
}

}  // namespace
}  // namespace headroom::sim
