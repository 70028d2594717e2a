// The staggering planner on scripted phase sequences, answers computed by hand.
#include "coord/stagger.h"

#include <gtest/gtest.h>

namespace headroom::coord {
namespace {

// Rollout 10 s at 1000 W, the rest 10 s at 200 W, 100 W held.
StepTimeline Job(bool in_rollout, double elapsed_s) {
  StepTimeline t;
  t.in_rollout = in_rollout;
  t.phase_elapsed_s = elapsed_s;
  t.rollout_s = 10;
  t.rest_s = 10;
  t.rollout_w = 1000;
  t.rest_w = 200;
  t.held_w = 100;
  return t;
}

TEST(PredictPower, TheCurrentPartTheRestOfTheStepTheHoldThenWholeSteps) {
  auto p = PredictPower(Job(true, 0), 10, 40, 1);
  ASSERT_EQ(p.size(), 40u);
  for (int i = 0; i < 40; ++i) {
    const double want = i < 10 ? 1000 : i < 20 ? 200 : i < 30 ? 100 : 1000;
    EXPECT_DOUBLE_EQ(p[i], want) << i;
  }
  // 2.5 s into the rollout: 7.5 s left; a cell split between two parts is their mean.
  p = PredictPower(Job(true, 2.5), 0, 20, 1);
  EXPECT_DOUBLE_EQ(p[6], 1000);
  EXPECT_DOUBLE_EQ(p[7], 600);
  EXPECT_DOUBLE_EQ(p[8], 200);
  EXPECT_DOUBLE_EQ(p[17], 600);
  EXPECT_DOUBLE_EQ(p[18], 1000);
  // 4 s into the rest: 6 s left, then the next step (held 5 s).
  p = PredictPower(Job(false, 4), 5, 25, 1);
  EXPECT_DOUBLE_EQ(p[5], 200);
  EXPECT_DOUBLE_EQ(p[6], 100);
  EXPECT_DOUBLE_EQ(p[10], 100);
  EXPECT_DOUBLE_EQ(p[11], 1000);
  EXPECT_DOUBLE_EQ(p[20], 1000);
  EXPECT_DOUBLE_EQ(p[21], 200);
  // No step length: the current part's power throughout.
  StepTimeline flat;
  flat.rest_w = 300;
  p = PredictPower(flat, 50, 10, 1);
  for (double w : p) EXPECT_DOUBLE_EQ(w, 300);
}

TEST(PlanHolds, TwoAlignedJobsOneHeldByARolloutLength) {
  // A and B in step, both starting a rollout: 2000 W for 10 s of every 20 against 1200 W.
  // Over 40 s the second rollouts can move: A held 10 s puts its rollout beside B's rest
  // (1100 W, 1200 W: no excess). Excess 16,000 J -> 8,000 J (the first rollouts cannot move).
  // At 0.01 tokens/J and 5 tokens/s: hold 10 saves 80 and costs 50; hold 5 saves 40 (4,000 J
  // still over) and costs 25. B is then best unheld (5 s: 4,000 J over; 10 s: 8,000 J).
  std::map<std::string, StaggerJob> jobs = {{"a", {Job(true, 0), 5}}, {"b", {Job(true, 0), 5}}};
  StaggerOptions o;
  o.budget_w = 1200;
  o.horizon_s = 40;
  o.max_hold_s = 10;
  o.hold_step_s = 5;
  o.value_tokens_per_j = 0.01;
  StaggerPlan p = PlanHolds(jobs, o);
  EXPECT_DOUBLE_EQ(p.hold_s["a"], 10);
  EXPECT_DOUBLE_EQ(p.hold_s["b"], 0);
  EXPECT_DOUBLE_EQ(p.excess_before_j, 16000);
  EXPECT_DOUBLE_EQ(p.excess_after_j, 8000);
  EXPECT_DOUBLE_EQ(p.peak_before_w, 2000);
  EXPECT_DOUBLE_EQ(p.hold_cost_tokens, 50);
  EXPECT_DOUBLE_EQ(p.tokens_saved, 30);
  // Coordinate descent finds nothing better here.
  o.passes = 3;
  EXPECT_DOUBLE_EQ(PlanHolds(jobs, o).hold_s["a"], 10);
  // Watts ten times cheaper: no hold is worth its tokens.
  o.value_tokens_per_j = 0.001;
  p = PlanHolds(jobs, o);
  EXPECT_DOUBLE_EQ(p.hold_s["a"], 0);
  EXPECT_DOUBLE_EQ(p.tokens_saved, 0);
  // No holds allowed.
  o.value_tokens_per_j = 0.01;
  o.max_hold_s = 0;
  EXPECT_DOUBLE_EQ(PlanHolds(jobs, o).hold_s["a"], 0);
}

TEST(PlanHolds, AStepBeyondTheHorizonIsNotMovedAndUnderTheBudgetNothingIs) {
  std::map<std::string, StaggerJob> jobs = {{"a", {Job(true, 0), 5}}, {"b", {Job(true, 0), 5}}};
  StaggerOptions o;
  o.budget_w = 1200;
  o.horizon_s = 15;  // the next steps start at 20
  o.max_hold_s = 10;
  o.value_tokens_per_j = 1;
  StaggerPlan p = PlanHolds(jobs, o);
  EXPECT_DOUBLE_EQ(p.hold_s["a"], 0);
  EXPECT_DOUBLE_EQ(p.excess_after_j, p.excess_before_j);
  o.horizon_s = 40;
  o.budget_w = 2000;  // never over
  p = PlanHolds(jobs, o);
  EXPECT_DOUBLE_EQ(p.hold_s["a"], 0);
  EXPECT_DOUBLE_EQ(p.hold_s["b"], 0);
  EXPECT_DOUBLE_EQ(p.excess_before_j, 0);
}

}  // namespace
}  // namespace headroom::coord
