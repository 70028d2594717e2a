// The decode curve below the lowest measured batch (docs/TWIN.md): memory-bound steps whose time
// and energy above idle-loaded are linear in n, continued from the curves at n_min. Checked from
// the outside: step times and energies recovered from PowerW and TokensPerS, slopes by finite
// differences of the logistics themselves.
#include <gtest/gtest.h>

#include <cmath>

#include "twin/curves.h"
#include "twin/scenario.h"

namespace headroom::twin {
namespace {

// H100-like: Llama-3.1-8B's decode shape (ML.ENERGY v3), idle with the model loaded 120 W.
DecodeCurves H100Like() {
  DecodeCurves d;
  d.power_w = {430.0, 220.0, 6.9, 0.87};
  d.tokens_per_s = {0.0, 9000.0, 7.5, 0.5};  // rising less than n at n_min, as measured
  d.n_min = 8.0;
  d.idle_loaded_w = 120.0;
  return d;
}

double StepS(const DecodeCurves& d, double n) { return n / d.TokensPerS(n); }
double StepJ(const DecodeCurves& d, double n) {
  return (d.PowerW(n) - d.idle_loaded_w) * StepS(d, n);
}

TEST(DecodeBelowTheLowestBatch, StepTimeAndEnergyAreLinearInN) {
  const DecodeCurves d = H100Like();
  for (double n : {1.0, 2.0, 3.0, 5.0, 6.5}) {
    EXPECT_NEAR(StepS(d, n + 1) - StepS(d, n), StepS(d, 2) - StepS(d, 1), 1e-12) << n;
    EXPECT_NEAR(StepJ(d, n + 1) - StepJ(d, n), StepJ(d, 2) - StepJ(d, 1), 1e-9) << n;
  }
}

TEST(DecodeBelowTheLowestBatch, ValueAndSlopeContinueTheMeasuredCurves) {
  const DecodeCurves d = H100Like();
  const double h = 1e-5;
  const double n = d.n_min;
  // Values meet at n_min.
  EXPECT_NEAR(d.PowerW(n - 1e-9), d.power_w(std::log2(n)), 1e-6);
  EXPECT_NEAR(d.TokensPerS(n - 1e-9), d.tokens_per_s(std::log2(n)), 1e-6);
  // Slopes: from below (the continuation) against the logistic's own finite difference.
  const double below_p = (d.PowerW(n - h) - d.PowerW(n - 2 * h)) / h;
  const double above_p = (d.power_w(std::log2(n + 2 * h)) - d.power_w(std::log2(n + h))) / h;
  EXPECT_NEAR(below_p, above_p, 1e-3 * std::abs(above_p) + 1e-6);
  const double below_t = (d.TokensPerS(n - h) - d.TokensPerS(n - 2 * h)) / h;
  const double above_t =
      (d.tokens_per_s(std::log2(n + 2 * h)) - d.tokens_per_s(std::log2(n + h))) / h;
  EXPECT_NEAR(below_t, above_t, 1e-3 * std::abs(above_t));
}

TEST(DecodeBelowTheLowestBatch, PowerStaysNearTheLowestBatchNotIdle) {
  const DecodeCurves d = H100Like();
  const DecodeCurves::MemoryBound m = d.Below();
  EXPECT_GT(m.t0_s, 0.0);
  EXPECT_GE(m.c_s, 0.0);
  EXPECT_GT(m.e0_j, 0.0);  // streaming the weights costs energy with one sequence in flight
  // One sequence in flight: P(1) = idle + (e0 + e1) / (t0 + c), above 80 % of P(8).
  EXPECT_DOUBLE_EQ(d.PowerW(1.0), 120.0 + (m.e0_j + m.e1_j) / (m.t0_s + m.c_s));
  EXPECT_GT(d.PowerW(1.0), 0.8 * d.PowerW(8.0));
  // Between 0 and 1 in flight the engine steps that fraction of the time.
  EXPECT_DOUBLE_EQ(d.PowerW(0.25), 120.0 + 0.25 * (d.PowerW(1.0) - 120.0));
  EXPECT_DOUBLE_EQ(d.PowerW(0.0), 120.0);
  // Fewer sequences, shorter steps: throughput falls less than n does.
  EXPECT_GT(d.TokensPerS(1.0), d.TokensPerS(8.0) / 8.0);
}

TEST(DecodeBelowTheLowestBatch, AThroughputThatDoesNotRiseKeepsTheStepTimeFlat) {
  DecodeCurves d = H100Like();
  d.tokens_per_s = {1000.0, 0.0, 7.5, 0.8};  // flat in n
  const DecodeCurves::MemoryBound m = d.Below();
  EXPECT_DOUBLE_EQ(m.c_s, 0.0);
  EXPECT_DOUBLE_EQ(m.t0_s, 8.0 / 1000.0);
  EXPECT_DOUBLE_EQ(d.TokensPerS(2.0), 2.0 / (8.0 / 1000.0));
}

TEST(DecodeBelowTheLowestBatch, MeasuredFromBatchOneLeavesTheCurveAlone) {
  auto s = LoadScenario("a100-7b-tp1");  // fitted to the paper's sweep from batch 1
  ASSERT_TRUE(s.ok());
  ASSERT_DOUBLE_EQ(s->decode.n_min, 1.0);
  for (double n : {1.0, 2.0, 4.0, 8.0}) {
    EXPECT_DOUBLE_EQ(s->decode.PowerW(n), s->decode.power_w(std::log2(n)));
  }
  EXPECT_DOUBLE_EQ(
      s->decode.PowerW(0.5),
      s->decode.idle_loaded_w + 0.5 * (s->decode.power_w(0.0) - s->decode.idle_loaded_w));
}

}  // namespace
}  // namespace headroom::twin
