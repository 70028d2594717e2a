#include "analysis/analyzer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "trace/reader.h"

namespace headroom::analysis {
namespace {

Result<AnalyzeResult> Analyze(const std::string& csv, AnalyzeOptions options) {
  trace::MemorySource source(csv);
  Analyzer analyzer(options);
  auto summary = trace::ReadTrace(source, "t.csv", {}, analyzer);
  if (!summary) return std::move(summary).error();
  return analyzer.Finish(summary->schema);
}

// Two GPUs, 1 s apart: GPU 0 alternates 100/200 W, GPU 1 holds 50 W; tokens 10 and 5 per step.
const std::string kTwoGpus =
    "t_s,gpu,power_w,tokens\n"
    "0,0,100,0\n0,1,50,0\n"
    "1,0,200,10\n1,1,50,5\n"
    "2,0,100,10\n2,1,50,5\n"
    "3,0,200,10\n3,1,50,5\n";

TEST(Analyzer, ScopeGpuByHand) {
  AnalyzeOptions o;
  o.windows_s = {2.0};
  o.budget_w = 100.0;
  o.nameplate_w = 400.0;
  auto r = Analyze(kTwoGpus, o);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->samples, 8u);
  EXPECT_EQ(r->gpus, 2u);
  EXPECT_DOUBLE_EQ(r->duration_s, 3.0);
  EXPECT_DOUBLE_EQ(*r->dt_s, 1.0);
  // Trapezoids: GPU 0: 150 + 150 + 150 = 450 J; GPU 1: 3 x 50 = 150 J.
  EXPECT_DOUBLE_EQ(r->energy_j, 600.0);
  EXPECT_DOUBLE_EQ(r->mean_power_w, 800.0 / 8);
  EXPECT_DOUBLE_EQ(r->peak_power_w, 200.0);
  EXPECT_EQ(r->gaps, 0u);
  // 2 s windows: GPU 0 {150, 150}, GPU 1 {50, 50}; the second ends at 4 <= 3 + 1: all count.
  ASSERT_EQ(r->windows.size(), 1u);
  EXPECT_EQ(r->windows[0].windows_counted, 4u);
  EXPECT_DOUBLE_EQ(*r->windows[0].violation_fraction, 0.5);
  EXPECT_DOUBLE_EQ(*r->windows[0].max_window_power_w, 150.0);
  // 1 s windows of GPU 0 swing 100 W each second.
  EXPECT_DOUBLE_EQ(*r->max_ramp_w_per_s, 100.0);
  EXPECT_DOUBLE_EQ(*r->tokens, 45.0);
  EXPECT_DOUBLE_EQ(*r->tokens_per_mwh, 45.0 / (600.0 / 3.6e9));
  EXPECT_DOUBLE_EQ(*r->nameplate_w, 400.0);
  EXPECT_DOUBLE_EQ(*r->peak_fraction_of_nameplate, 0.5);
}

TEST(Analyzer, ScopeSumOfUnalignedGpusByHand) {
  // GPU 0 at 0..4 s (10..50 W), GPU 1 at 0.5..3.5 s (1..4 W): dt = 1, grid 0.5..3.5,
  // sum series 11, 22, 33, 44.
  const std::string csv =
      "t_s,gpu,power_w\n"
      "0,0,10\n0.5,1,1\n1,0,20\n1.5,1,2\n2,0,30\n2.5,1,3\n3,0,40\n3.5,1,4\n4,0,50\n";
  AnalyzeOptions o;
  o.scope = Scope::kSum;
  o.windows_s = {2.0, 3.0};
  o.budget_w = 30.0;
  o.nameplate_w = 100.0;
  auto r = Analyze(csv, o);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_DOUBLE_EQ(r->mean_power_w, 27.5);
  EXPECT_DOUBLE_EQ(r->peak_power_w, 44.0);
  // Energy stays the trapezoids of the raw samples: 15+25+35+45 + 1.5+2.5+3.5.
  EXPECT_DOUBLE_EQ(r->energy_j, 127.5);
  // 2 s windows from 0.5: {11, 22} = 16.5, {33, 44} = 38.5 (ends 4.5 <= 3.5 + 1).
  EXPECT_EQ(r->windows[0].windows_counted, 2u);
  EXPECT_DOUBLE_EQ(*r->windows[0].violation_fraction, 0.5);
  EXPECT_DOUBLE_EQ(*r->windows[0].max_window_power_w, 38.5);
  // 3 s windows: {11, 22, 33} = 22 counts (ends 3.5); {44} ends 6.5 > 4.5: not counted.
  EXPECT_EQ(r->windows[1].windows_counted, 1u);
  EXPECT_DOUBLE_EQ(*r->windows[1].max_window_power_w, 22.0);
  // Nameplate of the sum is both GPUs'.
  EXPECT_DOUBLE_EQ(*r->nameplate_w, 200.0);
  EXPECT_DOUBLE_EQ(*r->peak_fraction_of_nameplate, 0.22);
  EXPECT_FALSE(r->tokens.has_value());
}

TEST(Analyzer, GapsAreCountedAndNotIntegrated) {
  const std::string csv = "t_s,gpu,power_w\n0,0,10\n1,0,10\n2,0,10\n3,0,10\n20,0,10\n21,0,10\n";
  auto r = Analyze(csv, {});
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(*r->dt_s, 1.0);
  EXPECT_EQ(r->gaps, 1u);                   // the 17 s step
  EXPECT_DOUBLE_EQ(r->energy_j, 4 * 10.0);  // four 1 s steps at 10 W
}

TEST(Analyzer, UnknownValuesAreNotInvented) {
  auto r = Analyze("t_s,gpu,power_w\n0,0,10\n1,0,20\n", {});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->budget_w.has_value());
  EXPECT_FALSE(r->windows[0].violation_fraction.has_value());
  EXPECT_FALSE(r->nameplate_w.has_value());
  EXPECT_FALSE(r->peak_fraction_of_nameplate.has_value());
  EXPECT_FALSE(r->tokens.has_value());
  EXPECT_FALSE(r->tokens_per_mwh.has_value());
  // 5 min windows over a 1 s trace: none counts.
  EXPECT_EQ(r->windows[2].windows_counted, 0u);
  EXPECT_FALSE(r->windows[2].max_window_power_w.has_value());
}

TEST(Analyzer, EmptyTraceIsAnError) {
  auto r = Analyze("t_s,gpu,power_w\n", {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("no samples"), std::string::npos);
}

TEST(Analyzer, SumScopeNeedsOverlappingGpus) {
  AnalyzeOptions o;
  o.scope = Scope::kSum;
  auto r = Analyze("t_s,gpu,power_w\n0,0,1\n1,0,1\n5,1,1\n6,1,1\n", o);
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace headroom::analysis
