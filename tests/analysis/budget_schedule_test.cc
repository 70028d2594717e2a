#include "analysis/budget_schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <string>

#include "analysis/analyzer.h"
#include "analysis/window_stats.h"
#include "trace/reader.h"

namespace headroom::analysis {
namespace {

using ::testing::HasSubstr;

TEST(BudgetSchedule, StepFunctionAndItsTimeWeightedMeanByHand) {
  BudgetSchedule s({{0.0, 300.0}, {10.0, 200.0}, {20.0, 400.0}});
  EXPECT_EQ(s.At(-1.0), 300.0);  // before the first point: the first value
  EXPECT_EQ(s.At(9.99), 300.0);
  EXPECT_EQ(s.At(10.0), 200.0);
  EXPECT_EQ(s.At(100.0), 400.0);
  EXPECT_DOUBLE_EQ(s.MeanW(5.0, 15.0), (5 * 300.0 + 5 * 200.0) / 10);
  EXPECT_DOUBLE_EQ(s.MeanW(-5.0, 5.0), 300.0);
  EXPECT_DOUBLE_EQ(s.MeanW(15.0, 30.0), (5 * 200.0 + 10 * 400.0) / 15);
  EXPECT_DOUBLE_EQ(s.MeanW(12.0, 12.0), 200.0);
  EXPECT_EQ(s.MinW(), 200.0);
  EXPECT_EQ(s.MaxW(), 400.0);
  EXPECT_EQ(s.DecreasesAt(), std::vector<double>{10.0});
  s.Append(25.0, 400.0);  // the same value: no change point
  EXPECT_EQ(s.points().size(), 3u);
  s.DropBefore(15.0);  // the point in force at 15 stays
  ASSERT_EQ(s.points().size(), 2u);
  EXPECT_EQ(s.points()[0].t_s, 10.0);
  EXPECT_DOUBLE_EQ(s.MeanW(15.0, 25.0), (5 * 200.0 + 5 * 400.0) / 10);
  const BudgetSchedule job = s.Scaled(4.0);
  EXPECT_DOUBLE_EQ(job.MeanW(15.0, 25.0), 4 * 300.0);
}

TEST(BudgetSchedule, FileErrorsNameTheLineAndTheField) {
  auto s = ParseBudgetSchedule("# a comment\nt_s,budget_w\n0,300\n60.5,240\r\n120,300\n", "b.csv",
                               1000.0);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(s->points().size(), 3u);
  EXPECT_EQ(s->At(61.0), 240.0);
  struct Bad {
    const char* text;
    const char* says;
  };
  for (const Bad& bad : {
           Bad{"", "b.csv: empty"},
           Bad{"t,budget\n0,1\n", "b.csv:1: expected the header 't_s,budget_w'"},
           Bad{"t_s,budget_w\n", "no change point"},
           Bad{"t_s,budget_w\n0,300\n0,200\n", "b.csv:3: field 't_s': 0 is not after"},
           Bad{"t_s,budget_w\n-1,300\n", "b.csv:2: field 't_s'"},
           Bad{"t_s,budget_w\n2e11,300\n",
               "b.csv:2: field 't_s': expected seconds in [0, 100000000000]"},
           Bad{"t_s,budget_w\nnan,300\n", "b.csv:2: field 't_s'"},
           Bad{"t_s,budget_w\n0,0\n", "b.csv:2: field 'budget_w': expected watts in (0, 1000]"},
           Bad{"t_s,budget_w\n0,1001\n", "field 'budget_w'"},
           Bad{"t_s,budget_w\n0,30x\n", "field 'budget_w'"},
           Bad{"t_s,budget_w\n0,300,1\n", "b.csv:2: expected two fields"},
       }) {
    auto r = ParseBudgetSchedule(bad.text, "b.csv", 1000.0);
    ASSERT_FALSE(r.ok()) << bad.text;
    EXPECT_THAT(r.error().message(), HasSubstr(bad.says)) << bad.text;
  }
}

TEST(SettleTracker, TrailingSecondMeanHeldFiveSecondsByHand) {
  // 300 W, down to 200 W at t = 10, to 100 W at 40, and again at 60 (after the last sample).
  const BudgetSchedule s({{0.0, 300.0}, {10.0, 200.0}, {40.0, 100.0}, {50.0, 150.0}, {60.0, 90.0}});
  SettleTracker tracker(&s);
  // 0.5 s samples: 280 W through t = 12, then 190 W through t = 55.
  for (int i = 0; i <= 110; ++i) {
    const double t = 0.5 * i;
    tracker.Add(t, t <= 12.0 ? 280.0 : 190.0);
  }
  tracker.Finish();
  // The trailing 1 s mean at 12.5 is (280 + 190) / 2 = 235 > 200; from 13 on it is 190; held
  // for 5 s at 18: settled 13 - 10 = 3 s after the decrease. At 40 (100 W) 190 W never
  // settles before the rise at 50 ends the event; the decrease at 60 comes after the last
  // sample.
  ASSERT_EQ(tracker.settled_s().size(), 1u);
  EXPECT_DOUBLE_EQ(tracker.settled_s()[0], 3.0);
  EXPECT_EQ(tracker.unsettled(), 2u);
  const SettleSummary sum = SummarizeSettle({3.0, 1.0, 2.0, 0.5}, 2);
  EXPECT_EQ(sum.events, 6u);
  EXPECT_EQ(sum.unsettled, 2u);
  EXPECT_EQ(*sum.p50_s, 1.0);  // nearest rank: the 2nd of 4
  EXPECT_EQ(*sum.p99_s, 3.0);
  EXPECT_EQ(*sum.max_s, 3.0);
  EXPECT_FALSE(SummarizeSettle({}, 3).p50_s.has_value());
}

TEST(SettleTracker, AnEventEndsAtTheNextChangeUpOrDown) {
  // A steady 250 W against decreases that a rise ends, and one it fits.
  const BudgetSchedule s(
      {{0.0, 300.0}, {10.0, 200.0}, {12.0, 260.0}, {20.0, 100.0}, {26.0, 270.0}, {40.0, 255.0}});
  SettleTracker tracker(&s);
  for (int i = 0; i <= 100; ++i) tracker.Add(0.5 * i, 250.0);  // to t = 50
  tracker.Finish();
  // 10 -> 200: ended by the rise at 12, unsettled. 20 -> 100: ended by the rise at 26,
  // unsettled. 40 -> 255: 250 W fits at once (its trailing mean is 250 from 40 on), held to 45.
  ASSERT_EQ(tracker.settled_s().size(), 1u);
  EXPECT_DOUBLE_EQ(tracker.settled_s()[0], 0.0);
  EXPECT_EQ(tracker.unsettled(), 2u);
}

TEST(WindowStats, AWindowIsOverTheTimeWeightedMeanOfAMovingBudget) {
  // Budget 300 W, 200 W from 3.5 s; 2 s windows of a steady 280 W, samples each second.
  const BudgetSchedule s({{0.0, 300.0}, {3.5, 200.0}});
  WindowStats w(2.0, &s);
  for (int t = 0; t <= 7; ++t) w.Add(t, 280.0);
  w.Finish(1.0);
  // Budgets over the windows: 300, (1.5 x 300 + 0.5 x 200) / 2 = 275, 200, 200: three over
  // (the mean of the samples' budgets, 300 in [2, 4), would have said two).
  EXPECT_EQ(w.counted(), 4u);
  EXPECT_EQ(w.over_budget(), 3u);
}

Result<AnalyzeResult> Analyze(const std::string& csv, AnalyzeOptions options, size_t batch_rows) {
  trace::MemorySource source(csv);
  Analyzer analyzer(options);
  trace::ReadOptions read;
  read.batch_rows = batch_rows;
  auto summary = trace::ReadTrace(source, "t.csv", read, analyzer);
  if (!summary) return std::move(summary).error();
  return analyzer.Finish(summary->schema);
}

// Two GPUs at 1 s for 13 s: GPU 0 280 W, GPU 1 150 W; a budget_w column of 300 W per GPU, 200
// from t = 4.
std::string TwoGpusWithBudget(bool moving) {
  std::string csv = "t_s,gpu,power_w,budget_w\n";
  for (int t = 0; t <= 12; ++t) {
    const int b = moving && t >= 4 ? 200 : 300;
    csv += fmt::format("{},0,280,{}\n{},1,150,{}\n", t, b, t, b);
  }
  return csv;
}

TEST(Analyzer, MovingBudgetFromAScheduleByHandInAnyBatching) {
  for (size_t rows : {2u, 3u, 26u}) {
    AnalyzeOptions o;
    o.windows_s = {2.0};
    o.budget_schedule = BudgetSchedule({{0.0, 300.0}, {3.5, 200.0}});
    auto r = Analyze(TwoGpusWithBudget(false), o, rows);  // the file wins over the column
    ASSERT_TRUE(r.ok()) << r.error().message();
    // Six counted 2 s windows a GPU (the seventh ends at 14 > 12 + 1); budgets 300, 275, then
    // 200: GPU 0 (280 W) is over in five, GPU 1 (150 W) in none.
    EXPECT_EQ(r->windows[0].windows_counted, 12u) << rows;
    EXPECT_DOUBLE_EQ(*r->windows[0].violation_fraction, 5.0 / 12) << rows;
    EXPECT_FALSE(r->budget_w.has_value());
    ASSERT_TRUE(r->moving_budget.has_value());
    EXPECT_EQ(r->moving_budget->source, "schedule");
    EXPECT_EQ(r->moving_budget->changes, 1u);
    EXPECT_DOUBLE_EQ(r->moving_budget->mean_w, (3.5 * 300 + 9.5 * 200) / 13);
    // GPU 1 settles at once (its trailing mean at 4 s is 150 W), 0.5 s after the change at 3.5;
    // GPU 0 never does.
    ASSERT_TRUE(r->settle.has_value());
    EXPECT_EQ(r->settle->events, 2u) << rows;
    EXPECT_EQ(r->settle->unsettled, 1u) << rows;
    EXPECT_DOUBLE_EQ(*r->settle->p99_s, 0.5) << rows;
  }
}

TEST(Analyzer, MovingBudgetFromTheTraceColumnPerGpuAndSummed) {
  for (size_t rows : {2u, 3u}) {
    AnalyzeOptions o;
    o.windows_s = {2.0};
    auto r = Analyze(TwoGpusWithBudget(true), o, rows);
    ASSERT_TRUE(r.ok()) << r.error().message();
    // 300 W in [0, 4), 200 after: GPU 0 over in the four windows from 4 s.
    EXPECT_DOUBLE_EQ(*r->windows[0].violation_fraction, 4.0 / 12) << rows;
    EXPECT_EQ(r->moving_budget->source, "column");
    EXPECT_EQ(r->settle->events, 2u);
    EXPECT_EQ(r->settle->unsettled, 1u);
    EXPECT_DOUBLE_EQ(*r->settle->max_s, 0.0);
    o.scope = Scope::kSum;  // against the job's budget: 600 W, 400 W from 4 s; power 430 W
    r = Analyze(TwoGpusWithBudget(true), o, rows);
    ASSERT_TRUE(r.ok()) << r.error().message();
    EXPECT_DOUBLE_EQ(*r->windows[0].violation_fraction, 4.0 / 6) << rows;
    EXPECT_DOUBLE_EQ(r->moving_budget->min_w, 400.0);
    EXPECT_DOUBLE_EQ(r->moving_budget->max_w, 600.0);
    EXPECT_EQ(r->settle->events, 1u);
    EXPECT_EQ(r->settle->unsettled, 1u);
  }
  // A column that never moves is a fixed budget; --budget-w wins over a column.
  AnalyzeOptions o;
  o.windows_s = {2.0};
  auto r = Analyze(TwoGpusWithBudget(false), o, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r->budget_w, 300.0);
  EXPECT_FALSE(r->moving_budget.has_value());
  EXPECT_FALSE(r->settle.has_value());
  EXPECT_DOUBLE_EQ(*r->windows[0].violation_fraction, 0.0);
  o.budget_w = 200.0;
  r = Analyze(TwoGpusWithBudget(true), o, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(*r->windows[0].violation_fraction, 6.0 / 12);
  // A bad budget value is an error naming the field (the reader refuses a negative one first).
  o.budget_w.reset();
  r = Analyze("t_s,gpu,power_w,budget_w\n0,0,100,300\n1,0,100,0\n", o, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("field 'budget_w': 0 at t_s=1"));
}

}  // namespace
}  // namespace headroom::analysis
