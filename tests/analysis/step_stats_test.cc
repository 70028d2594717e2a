#include "analysis/step_stats.h"

#include <gtest/gtest.h>

namespace headroom::analysis {
namespace {

TEST(StepStats, MedianOfAnEvenCountIsTheMeanOfTheMiddleTwo) {
  StepStats s;
  for (double step : {1.0, 10.0, 2.0, 1.0}) s.Add(step, step * 100.0);
  const auto r = s.Finish();
  ASSERT_TRUE(r.dt_s.has_value());
  EXPECT_DOUBLE_EQ(*r.dt_s, 1.5);  // sorted 1, 1, 2, 10
  // 10 > 5 * 1.5 is a gap: excluded from energy, counted once.
  EXPECT_EQ(r.gaps, 1u);
  EXPECT_DOUBLE_EQ(r.energy_j, 100.0 + 200.0 + 100.0);
  EXPECT_EQ(r.steps, 4u);
}

TEST(StepStats, MedianOfAnOddCount) {
  StepStats s;
  for (double step : {0.2, 0.1, 0.1}) s.Add(step, 1.0);
  EXPECT_DOUBLE_EQ(*s.Finish().dt_s, 0.1);
}

TEST(StepStats, AStepOfExactlyFiveDtIsNotAGap) {
  StepStats s;
  for (double step : {1.0, 1.0, 5.0}) s.Add(step, 1.0);
  const auto r = s.Finish();
  EXPECT_EQ(r.gaps, 0u);
  EXPECT_DOUBLE_EQ(r.energy_j, 3.0);
}

TEST(TraceStep, AMedianOfZeroIsRefusedNamingTheRepeatedTimes) {
  // A 10 Hz logger writing whole seconds: per second one step of 1 s and nine of 0 s.
  StepStats s;
  for (int second = 0; second < 60; ++second) {
    s.Add(1.0, 1.0);
    for (int i = 0; i < 9; ++i) s.Add(0.0, 0.0);
  }
  const auto summary = s.Finish();
  EXPECT_EQ(summary.repeated, 540u);
  const auto step = TraceStep(summary);
  ASSERT_FALSE(step.ok());
  EXPECT_NE(step.error().message().find("field 't_s': 540 of 600 steps repeat their GPU's "
                                        "previous time, so the median step is 0 s"),
            std::string::npos)
      << step.error().message();
}

TEST(TraceStep, AFewRepeatedTimesKeepThePositiveMedian) {
  StepStats s;
  for (double step : {1.0, 0.0, 1.0, 1.0}) s.Add(step, 0.0);
  const auto summary = s.Finish();
  EXPECT_EQ(summary.repeated, 1u);
  ASSERT_TRUE(TraceStep(summary).ok());
  EXPECT_DOUBLE_EQ(*TraceStep(summary), 1.0);
  EXPECT_FALSE(TraceStep(StepStats().Finish()).ok());  // no step at all
}

TEST(StepStats, NoStepsNoDt) {
  StepStats s;
  const auto r = s.Finish();
  EXPECT_FALSE(r.dt_s.has_value());
  EXPECT_EQ(r.energy_j, 0.0);
}

TEST(StepStats, ManyDistinctStepsGrowTheTable) {
  StepStats s;
  // Steps 1..1001 ms, each once, plus 2000 steps of 0.5 ms: the median is 0.5 ms.
  for (int i = 1; i <= 1001; ++i) s.Add(i * 1e-3, 1.0);
  for (int i = 0; i < 2000; ++i) s.Add(0.5e-3, 1.0);
  const auto r = s.Finish();
  EXPECT_EQ(s.distinct_steps(), 1002u);
  EXPECT_DOUBLE_EQ(*r.dt_s, 0.5e-3);
  EXPECT_EQ(r.gaps, 1001u - 2u);  // steps > 2.5 ms: 3..1001 ms
  EXPECT_EQ(r.steps, 3001u);
}

TEST(StepStats, ACountAddsThatManyStepsAtOnce) {
  // 8 GPUs stepping 1 s together three times (areas summed over the GPUs), one 2 s step:
  // 25 steps, median 1 s, energy 3 x 800 + 20 J.
  StepStats s;
  for (int i = 0; i < 3; ++i) s.Add(1.0, 800.0, 8);
  s.Add(2.0, 20.0);
  const auto r = s.Finish();
  EXPECT_EQ(r.steps, 25u);
  EXPECT_DOUBLE_EQ(*r.dt_s, 1.0);
  EXPECT_DOUBLE_EQ(r.energy_j, 2420.0);
  EXPECT_EQ(r.gaps, 0u);
}

}  // namespace
}  // namespace headroom::analysis
