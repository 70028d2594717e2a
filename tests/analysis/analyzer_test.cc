#include "analysis/analyzer.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <malloc.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "trace/reader.h"

namespace headroom::analysis {
namespace {

Result<AnalyzeResult> Analyze(const std::string& csv, AnalyzeOptions options,
                              trace::ReadOptions read = {}) {
  trace::MemorySource source(csv);
  Analyzer analyzer(options);
  auto summary = trace::ReadTrace(source, "t.csv", read, analyzer);
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

TEST(Analyzer, ScopeGpuByHandInAnyBatching) {
  // kTwoGpus is whole polls: batches of whole polls (2, 4 rows) keep the GPUs in lockstep;
  // batches of 3 rows split polls. Every batching gives the values by hand above.
  for (size_t batch_rows : {2u, 3u, 4u}) {
    AnalyzeOptions o;
    o.windows_s = {2.0};
    o.budget_w = 100.0;
    trace::ReadOptions read;
    read.batch_rows = batch_rows;
    auto r = Analyze(kTwoGpus, o, read);
    ASSERT_TRUE(r.ok()) << r.error().message();
    EXPECT_EQ(r->samples, 8u) << batch_rows;
    EXPECT_DOUBLE_EQ(*r->dt_s, 1.0) << batch_rows;
    EXPECT_DOUBLE_EQ(r->energy_j, 600.0) << batch_rows;
    EXPECT_DOUBLE_EQ(r->mean_power_w, 100.0) << batch_rows;
    EXPECT_DOUBLE_EQ(r->peak_power_w, 200.0) << batch_rows;
    EXPECT_EQ(r->windows[0].windows_counted, 4u) << batch_rows;
    EXPECT_DOUBLE_EQ(*r->windows[0].violation_fraction, 0.5) << batch_rows;
    EXPECT_DOUBLE_EQ(*r->windows[0].max_window_power_w, 150.0) << batch_rows;
    EXPECT_DOUBLE_EQ(*r->max_ramp_w_per_s, 100.0) << batch_rows;
    EXPECT_DOUBLE_EQ(*r->tokens, 45.0) << batch_rows;
  }
}

TEST(Analyzer, AGpuJoiningLaterByHand) {
  // GPUs 0 and 1 poll together at t = 0..5 s (0: 100/200 W alternating, 1: 50 W); GPU 2 joins
  // at t = 4 (300 W). Batches of 2 rows: the first five are whole polls of GPUs 0 and 1, then
  // the polls hold three GPUs.
  const std::string csv =
      "t_s,gpu,power_w\n"
      "0,0,100\n0,1,50\n1,0,200\n1,1,50\n2,0,100\n2,1,50\n3,0,200\n3,1,50\n"
      "4,0,100\n4,1,50\n4,2,300\n5,0,200\n5,1,50\n5,2,300\n";
  AnalyzeOptions o;
  o.windows_s = {2.0};
  o.budget_w = 100.0;
  trace::ReadOptions read;
  read.batch_rows = 2;
  auto r = Analyze(csv, o, read);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->gpus, 3u);
  EXPECT_EQ(r->samples, 14u);
  EXPECT_DOUBLE_EQ(*r->dt_s, 1.0);
  // Trapezoids: GPU 0 5 x 150, GPU 1 5 x 50, GPU 2 1 x 300.
  EXPECT_DOUBLE_EQ(r->energy_j, 1300.0);
  EXPECT_DOUBLE_EQ(r->mean_power_w, 1800.0 / 14);
  EXPECT_DOUBLE_EQ(r->peak_power_w, 300.0);
  // 2 s windows: GPU 0 {150, 150, 150}, GPU 1 {50, 50, 50}, GPU 2 (from its own t0 = 4) {300};
  // every last window ends at 6 <= 5 + 1. Over 100 W: 3 + 0 + 1 of 7.
  EXPECT_EQ(r->windows[0].windows_counted, 7u);
  EXPECT_DOUBLE_EQ(*r->windows[0].violation_fraction, 4.0 / 7);
  EXPECT_DOUBLE_EQ(*r->windows[0].max_window_power_w, 300.0);
  EXPECT_DOUBLE_EQ(*r->max_ramp_w_per_s, 100.0);
}

TEST(Analyzer, GpusInLockstepGiveWhatEachGpuAloneGives) {
  // GPUs polled together at 10 Hz with a gap (whole polls: every statistic runs once per poll
  // for all GPUs), against the same samples with every poll after the first listed in reverse
  // GPU order (each GPU's samples taken alone). Same samples, same numbers. Eight GPUs (loops
  // of a fixed length) and three (any count; whole polls in the default batches too).
  for (int gpus : {8, 3}) {
    std::mt19937_64 rng(17);
    std::uniform_int_distribution<int> centiwatts(5000, 45000);
    std::string in_order = "t_s,gpu,power_w\n", reversed = in_order;
    for (int poll = 0; poll < 20000; ++poll) {
      const double t = (poll < 12000 ? 0 : 300.0) + poll * 0.1;
      std::vector<std::string> rows;
      for (int g = 0; g < gpus; ++g) {
        rows.push_back(fmt::format("{},{},{}\n", t, g, centiwatts(rng) / 100.0));
        in_order += rows.back();
      }
      if (poll == 0) {
        for (const auto& row : rows) reversed += row;
      } else {
        for (auto it = rows.rbegin(); it != rows.rend(); ++it) reversed += *it;
      }
    }
    AnalyzeOptions o;
    o.windows_s = {0.5, 30.0, 300.0};
    o.budget_w = 250.0;
    auto a = Analyze(in_order, o);
    auto b = Analyze(reversed, o);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->samples, 20000u * gpus);
    EXPECT_EQ(a->gaps, b->gaps);
    EXPECT_EQ(a->gaps, static_cast<uint64_t>(gpus));
    EXPECT_DOUBLE_EQ(*a->dt_s, *b->dt_s);
    EXPECT_NEAR(a->energy_j, b->energy_j, 1e-9 * b->energy_j);
    EXPECT_NEAR(a->mean_power_w, b->mean_power_w, 1e-9 * b->mean_power_w);
    EXPECT_DOUBLE_EQ(a->peak_power_w, b->peak_power_w);
    EXPECT_DOUBLE_EQ(a->duration_s, b->duration_s);
    for (size_t w = 0; w < 3; ++w) {
      EXPECT_EQ(a->windows[w].windows_counted, b->windows[w].windows_counted) << gpus << " " << w;
      EXPECT_EQ(a->windows[w].windows_over_budget, b->windows[w].windows_over_budget) << w;
      EXPECT_NEAR(*a->windows[w].max_window_power_w, *b->windows[w].max_window_power_w, 1e-9) << w;
    }
    EXPECT_NEAR(*a->max_ramp_w_per_s, *b->max_ramp_w_per_s, 1e-9);
    EXPECT_NEAR(*a->spectrum.band_fraction, *b->spectrum.band_fraction, 1e-12);
    EXPECT_DOUBLE_EQ(*a->spectrum.dominant_hz, *b->spectrum.dominant_hz);
  }
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

TEST(Analyzer, TimesRepeatedByACoarseLoggerAreRefusedNotIntegratedAsZero) {
  // 10 rows a second, the time written in whole seconds: before, dt 0, energy 0, every real
  // step a gap, exit 0.
  std::string csv = "t_s,gpu,power_w,tokens\n";
  for (int i = 0; i < 600; ++i) csv += fmt::format("{},0,300,1\n", i / 10);
  for (Scope scope : {Scope::kGpu, Scope::kSum}) {
    AnalyzeOptions o;
    o.scope = scope;
    auto r = Analyze(csv, o);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message().find("540 of 599 steps repeat"), std::string::npos)
        << r.error().message();
  }
}

TEST(Analyzer, MemoryFollowsEachGpusDataNotTheGpuCount) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizers' allocators keep their own books (mallinfo2 is glibc's)";
#endif
  // 10,000 GPUs of two samples each. Before: every GPU took a Welch segment (32 KiB) and run
  // buffers of a whole batch (2 x 31.5 KiB) at once, ~1 GB; 30,000 aborted with bad_alloc.
  constexpr int kGpus = 10000;
  std::string csv = "t_s,gpu,power_w\n";
  for (int t = 0; t < 2; ++t) {
    for (int g = 0; g < kGpus; ++g) csv += fmt::format("{},{},300\n", t, g);
  }
  trace::ReadOptions read;
  read.max_gpus = kGpus;
  const auto heap_bytes = [] {
    const struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
  };
  const size_t before = heap_bytes();
  {
    trace::MemorySource source(csv);
    Analyzer analyzer({});
    auto summary = trace::ReadTrace(source, "t.csv", read, analyzer);
    ASSERT_TRUE(summary.ok()) << summary.error().message();
    const size_t during = heap_bytes();
    auto r = analyzer.Finish(summary->schema);
    ASSERT_TRUE(r.ok()) << r.error().message();
    EXPECT_EQ(r->gpus, static_cast<uint64_t>(kGpus));
    const size_t after = heap_bytes();
    const size_t per_gpu = (std::max(during, after) - std::min(before, during)) / kGpus;
    EXPECT_LT(per_gpu, size_t{10} << 10) << per_gpu << " bytes per GPU";
  }
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
