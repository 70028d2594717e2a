// The pilot statistics against values computed independently (by hand in the comments), and
// the validation by simulation on synthetic AR(1) blocks (docs/PILOT.md, "Validation").
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdio>

#include "pilot/blocks.h"
#include "pilot/design.h"
#include "pilot/judge.h"
#include "pilot/simulate.h"
#include "pilot/statistics.h"
#include "trace/reader.h"

namespace headroom::pilot {
namespace {

using ::testing::HasSubstr;

TEST(NormalQuantile, MatchesTables) {
  // Phi^-1(0.975) = 1.959963984540054, Phi^-1(0.8) = 0.8416212335729143,
  // Phi^-1(0.995) = 2.5758293035489004 (scipy.stats.norm.ppf).
  EXPECT_NEAR(NormalQuantile(0.975), 1.959963984540054, 1e-12);
  EXPECT_NEAR(NormalQuantile(0.8), 0.8416212335729143, 1e-12);
  EXPECT_NEAR(NormalQuantile(0.995), 2.5758293035489004, 1e-12);
  EXPECT_NEAR(NormalQuantile(0.01), -2.3263478740408408, 1e-12);
  EXPECT_DOUBLE_EQ(NormalQuantile(0.5), 0.0);
}

TEST(StudentTQuantile, MatchesTables) {
  // t tables (scipy.stats.t.ppf): 0.975 at df 1, 2, 3, 9, 18, 60.
  EXPECT_NEAR(StudentTQuantile(0.975, 1), 12.706204736, 1e-8);
  EXPECT_NEAR(StudentTQuantile(0.975, 2), 4.302652730, 1e-8);
  EXPECT_NEAR(StudentTQuantile(0.975, 3), 3.182446305, 1e-8);
  EXPECT_NEAR(StudentTQuantile(0.025, 5), -2.570581836, 1e-8);
  EXPECT_NEAR(StudentTQuantile(0.975, 9), 2.262157163, 1e-8);
  EXPECT_NEAR(StudentTQuantile(0.975, 18), 2.100922040, 1e-8);
  // The CDF at a known point: P(T_4 <= 2.776445) = 0.975.
  EXPECT_NEAR(StudentTCdf(2.776445105, 4), 0.975, 1e-9);
  EXPECT_NEAR(StudentTQuantile(0.975, 60), 2.000297822, 1e-8);
}

TEST(Bootstrap, ExpandedLevel) {
  // 10 + 10 blocks at alpha 0.05: z = sqrt(10/9) x t(0.975, 18) = 1.05409 x 2.10092 = 2.21456,
  // a = 2 (1 - Phi(2.21456)) = 0.02679.
  EXPECT_NEAR(ExpandedAlpha(0.05, 10, 10), 0.02679, 1e-4);
  EXPECT_DOUBLE_EQ(ExpandedAlpha(0.05, 1, 10), 0.05);
}

TEST(SampleSize, MatchesTheClosedFormByHand) {
  // mean 5, sd 1, effect 10 % -> delta 0.5; alpha 0.05, power 0.8:
  // z = 1.959964 + 0.841621 = 2.801585, z^2 = 7.848879;
  // n = 2 x 7.848879 x 1^2 / 0.5^2 = 62.791 -> 63 blocks per arm.
  const auto s = BlocksPerArm({5.0, 1.0, 0.0, 0.10, 0.05, 0.8});
  EXPECT_NEAR(s.formula_blocks_per_arm, 62.7910, 1e-3);
  EXPECT_EQ(s.blocks_per_arm, 63);
  EXPECT_DOUBLE_EQ(s.variance_inflation, 1.0);
  // rho = 0.5: VIF = 1.5 / 0.5 = 3 -> n = 188.373 -> 189.
  const auto r = BlocksPerArm({5.0, 1.0, 0.5, 0.10, 0.05, 0.8});
  EXPECT_DOUBLE_EQ(r.variance_inflation, 3.0);
  EXPECT_EQ(r.blocks_per_arm, 189);
  // A negative correlation is not counted on.
  EXPECT_EQ(BlocksPerArm({5.0, 1.0, -0.4, 0.10, 0.05, 0.8}).blocks_per_arm, 63);
  // The effect's sign does not matter.
  EXPECT_EQ(BlocksPerArm({5.0, 1.0, 0.0, -0.10, 0.05, 0.8}).blocks_per_arm, 63);
  // A huge effect: the permutation floor (C(8,4) = 70, 2/70 = 0.029 <= 0.05; C(6,3) = 20,
  // 2/20 = 0.1 > 0.05): 4 blocks per arm.
  EXPECT_EQ(MinBlocksPerArmForPermutation(0.05), 4);
  EXPECT_EQ(MinBlocksPerArmForPermutation(0.01), 5);  // C(10,5) = 252: 2/252 = 0.0079
  EXPECT_EQ(BlocksPerArm({5.0, 0.01, 0.0, 0.5, 0.05, 0.8}).blocks_per_arm, 4);
}

TEST(Lag1Autocorrelation, ByHand) {
  // 1, 2, 3, 4: mean 2.5, deviations -1.5 -0.5 0.5 1.5; sum of squares 5;
  // lag-1 products 0.75 - 0.25 + 0.75 = 1.25; r1 = 0.25.
  EXPECT_DOUBLE_EQ(*Lag1Autocorrelation({{1, 2, 3, 4}}), 0.25);
  // Alternating 1, 3, 1, 3: deviations -1 1 -1 1; products -3; squares 4: r1 = -0.75.
  EXPECT_DOUBLE_EQ(*Lag1Autocorrelation({{1, 3, 1, 3}}), -0.75);
  // Two series about their common mean 2.5, no pair across them: {1, 2}, {3, 4}:
  // products (-1.5)(-0.5) + (0.5)(1.5) = 1.5; squares 5: r1 = 0.3.
  EXPECT_DOUBLE_EQ(*Lag1Autocorrelation({{1, 2}, {3, 4}}), 0.3);
  EXPECT_FALSE(Lag1Autocorrelation({{2, 2, 2}}));
  EXPECT_FALSE(Lag1Autocorrelation({{1}, {2}}));
}

TEST(PermutationTest, ExactOnATinyExampleEnumeratedByHand) {
  // C = {3, 4}, U = {1, 2}: observed |3.5 - 1.5| = 2. The 6 ways to pick C from {1,2,3,4}:
  // {1,2}: |1.5-3.5| = 2; {1,3}: 1; {1,4}: 0; {2,3}: 0; {2,4}: 1; {3,4}: 2.
  // Two of six are >= 2: p = 1/3.
  const std::vector<double> c = {3, 4}, u = {1, 2};
  const auto r = PermutationTest(c, u, 1000, 1);
  EXPECT_TRUE(r.exact);
  EXPECT_EQ(r.permutations, 6u);
  EXPECT_DOUBLE_EQ(r.p_value, 1.0 / 3.0);
  // Unequal arms: C = {10}, U = {1, 2, 3}: observed |10 - 2| = 8; relabellings picking one
  // block as C: 10 -> 8, 1 -> |1 - 5| = 4, 2 -> |2 - 14/3| = 2.67, 3 -> |3 - 13/3| = 1.33:
  // p = 1/4.
  const std::vector<double> c1 = {10}, u1 = {1, 2, 3};
  EXPECT_DOUBLE_EQ(PermutationTest(c1, u1, 1000, 1).p_value, 0.25);
  // The same example forced to Monte Carlo converges on 1/3: p = (1 + hits)/(1 + M).
  const auto mc = PermutationTest(c, u, 20000, 7, /*max_exact=*/1);
  EXPECT_FALSE(mc.exact);
  EXPECT_NEAR(mc.p_value, 1.0 / 3.0, 0.015);  // binomial sd sqrt(2/9/20000) = 0.0033
}

TEST(PermutationTest, SmallestPValueOfFourAgainstFour) {
  // Perfect separation with 4 + 4 blocks: 2 of C(8,4) = 70 relabellings are as extreme.
  const std::vector<double> c = {10, 11, 12, 13}, u = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(PermutationTest(c, u, 0, 1).p_value, 2.0 / 70.0);
}

TEST(Bootstrap, KnownDistribution) {
  // C = {1, 3}, U = {2, 2}: a resampled C mean is 1 (p 1/4), 2 (1/2) or 3 (1/4); U's is 2.
  // Effect = 100 (m / 2 - 1): -50, 0, +50 with those probabilities, so the 2.5 % and 97.5 %
  // quantiles are -50 and +50, and the difference's -1 and +1.
  const std::vector<double> c = {1, 3}, u = {2, 2};
  const auto b = BootstrapInterval(c, u, 0.05, 4000, 3);
  EXPECT_DOUBLE_EQ(*b.effect_lo_pct, -50.0);
  EXPECT_DOUBLE_EQ(*b.effect_hi_pct, 50.0);
  EXPECT_DOUBLE_EQ(b.difference_lo, -1.0);
  EXPECT_DOUBLE_EQ(b.difference_hi, 1.0);
  // Constant arms: the interval is the point, 100 (6/5 - 1) = 20 %.
  const std::vector<double> c2 = {6, 6, 6}, u2 = {5, 5};
  const auto p = BootstrapInterval(c2, u2, 0.05, 100, 3);
  EXPECT_NEAR(*p.effect_lo_pct, 20.0, 1e-12);
  EXPECT_NEAR(*p.effect_hi_pct, 20.0, 1e-12);
  // Deterministic for a seed.
  const std::vector<double> c3 = {1, 5, 2, 8}, u3 = {3, 1, 4, 1};
  EXPECT_EQ(BootstrapInterval(c3, u3, 0.05, 500, 9).difference_lo,
            BootstrapInterval(c3, u3, 0.05, 500, 9).difference_lo);
}

TEST(Bootstrap, LargeSampleMatchesTheNormalInterval) {
  // 400 + 400 i.i.d. blocks, mean 100, sd 10: the difference of means has sd
  // sqrt(2 x 100 / 400) = 0.7071, so the 95 % interval is about +-1.386 around the observed
  // difference (the bootstrap's plug-in sd is smaller by sqrt(399/400), negligible here).
  const auto c = Ar1Blocks(400, 100.0, 0.1, 0.0, 11);
  const auto u = Ar1Blocks(400, 100.0, 0.1, 0.0, 12);
  const auto b = BootstrapInterval(c, u, 0.05, 20000, 5, /*expand=*/false);
  const double diff = Mean(c) - Mean(u);
  const double half = 1.959964 * std::sqrt(SampleVariance(c) / 400 + SampleVariance(u) / 400);
  EXPECT_NEAR(b.difference_lo, diff - half, 0.06);
  EXPECT_NEAR(b.difference_hi, diff + half, 0.06);
}

TEST(Schedule, PairsHoldOneBlockOfEachArm) {
  const auto s = AlternatingSchedule(50, 3600.0, 42);
  ASSERT_EQ(s.size(), 100u);
  int controlled_first = 0;
  for (size_t p = 0; p < 50; ++p) {
    EXPECT_NE(s[2 * p].arm, s[2 * p + 1].arm);
    EXPECT_DOUBLE_EQ(s[2 * p + 1].start_s, static_cast<double>(2 * p + 1) * 3600.0);
    controlled_first += s[2 * p].arm == Arm::kControlled;
  }
  EXPECT_GT(controlled_first, 10);  // random order, not always the same
  EXPECT_LT(controlled_first, 40);
  EXPECT_EQ(AlternatingSchedule(50, 3600.0, 42)[7].arm, s[7].arm);  // seeded
}

TEST(Plan, RefusesAShortBaselineInOneLine) {
  PlanOptions o;
  o.block_s = 86400.0;
  const auto r = PlanPilot({{1.0, 2.0, 3.0}}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(),
            "baseline holds 3 blocks of 24h; at least 8 are needed to estimate the block "
            "variance: give more baseline or a shorter --block");
}

TEST(Plan, SizesCostsAndAdvises) {
  // Blocks 9, 11, 9, 11, ...: mean 10, sd sqrt(16/15) = 1.0328 (16 blocks), r1 = -15/16.
  std::vector<double> b;
  for (int i = 0; i < 16; ++i) b.push_back(i % 2 ? 11.0 : 9.0);
  PlanOptions o;
  o.effect_frac = 0.05;  // delta 0.5
  o.block_s = 3600.0;
  o.gpus = 8;
  o.usd_per_gpu_hour = 2.0;
  const auto p = PlanPilot({b}, o);
  ASSERT_TRUE(p.ok()) << p.error().message();
  // n = 2 x 7.848879 x (16/15) / 0.25 = 66.98 -> 67 per arm (negative r1: no inflation).
  EXPECT_EQ(p->size.blocks_per_arm, 67);
  EXPECT_EQ(p->blocks, 134);
  EXPECT_DOUBLE_EQ(p->days, 134.0 / 24.0);
  EXPECT_DOUBLE_EQ(p->gpu_hours_at_risk, 67.0 * 8.0);
  EXPECT_DOUBLE_EQ(p->cost_usd, 67.0 * 8.0 * 2.0);
  EXPECT_NEAR(p->autocorrelation_lag1, -15.0 / 16.0, 1e-12);
  EXPECT_EQ(p->schedule.size(), 134u);

  // A slow drift: large autocorrelation, advice to lengthen the blocks.
  std::vector<double> drift;
  for (int i = 0; i < 40; ++i) drift.push_back(10.0 + std::sin(i / 6.0));
  const auto d = PlanPilot({drift}, o);
  ASSERT_TRUE(d.ok());
  EXPECT_GT(d->autocorrelation_lag1, 0.8);
  ASSERT_FALSE(d->advice.empty());
  EXPECT_THAT(d->advice[0], HasSubstr("longer blocks"));

  // Zero mean: no relative effect.
  const auto z = PlanPilot({std::vector<double>(10, 0.0)}, o);
  ASSERT_FALSE(z.ok());
  EXPECT_THAT(z.error().message(), HasSubstr("block mean is 0"));
}

// The validation of docs/PILOT.md on synthetic AR(1) blocks. 200 pilots of each kind at
// 10 blocks per arm; the interval is nominally 95 %. If its true coverage were 0.95, seeing
// under 90 % of 200 would have probability about 0.1 % (binomial sd 0.0154, 3.2 sd); the
// requirement is >= 90 %. For false positives at alpha 0.05, 200 pilots have sd 0.0154: more
// than 0.05 + 3 sd = 0.096 would be a real excess. Deterministic for its seeds.
TEST(Validation, SyntheticAr1PilotsRecoverTheEffectAndRarelyCryWolf) {
  for (const double phi : {0.0, 0.5}) {
    const auto baseline = Ar1Blocks(5000, 50.0, 0.08, phi, 2024);
    SimulationOptions o;
    o.pilots = 200;
    o.blocks_per_arm = 10;
    o.effect_frac = 0.10;
    o.effect.bootstrap_resamples = 2000;
    o.effect.permutations = 2000;
    o.seed = 7;
    const auto r = SimulatePilots({baseline}, o);
    SCOPED_TRACE(testing::Message()
                 << "phi " << phi << ": coverage " << r.coverage() << ", false positives "
                 << r.false_positive_rate() << ", power " << r.power());
    std::printf(
        "AR(1) phi %.1f, 200 pilots of 10 + 10 blocks, +10%% on cv 8%%: coverage %.3f, "
        "false positives %.3f, power %.3f\n",
        phi, r.coverage(), r.false_positive_rate(), r.power());
    EXPECT_GE(r.coverage(), 0.90);
    EXPECT_LE(r.false_positive_rate(), 0.096);
    EXPECT_GE(r.power(), 0.5);  // 10 % on cv 8 %: about 0.8 by the normal formula
  }
}

TEST(Wilson, KnownInterval) {
  // 95 of 100 at 95 %: Wilson (0.8882, 0.9785) (statsmodels proportion_confint 'wilson').
  const auto w = WilsonInterval(95, 100);
  EXPECT_NEAR(w.lo, 0.8882, 1e-4);
  EXPECT_NEAR(w.hi, 0.9785, 1e-4);
}

// ---------------------------------------------------------------------------------------------
// Blocks from traces: the Analyzer's definitions.

TraceData ReadMemory(const std::string& text) {
  trace::MemorySource source(text);
  trace::CollectingSink sink;
  auto summary = trace::ReadTrace(source, "t.csv", {}, sink);
  EXPECT_TRUE(summary.ok());
  return {"t.csv", summary->schema, std::move(sink.series())};
}

TEST(Blocks, ATraceWhoseTimesRepeatIsRefusedAsAnalyzeRefusesIt) {
  std::string csv = "t_s,gpu,power_w\n";
  for (int i = 0; i < 40; ++i) csv += fmt::format("{},0,100\n", i / 4);
  auto span = SpanOf(ReadMemory(csv));
  ASSERT_FALSE(span.ok());
  EXPECT_NE(span.error().message().find("t.csv: field 't_s': 30 of 39 steps repeat"),
            std::string::npos)
      << span.error().message();
}

TEST(Blocks, EnergyTokensAndViolationsPerBlock) {
  // One GPU at 1 s: 100 W for t = 0..3, 300 W for t = 4..7; 10 tokens a row.
  std::string csv = "t_s,gpu,power_w,tokens\n";
  for (int t = 0; t < 8; ++t) csv += fmt::format("{},0,{},10\n", t, t < 4 ? 100 : 300);
  const auto trace = ReadMemory(csv);
  MeasureOptions o;
  o.budget_w = 200.0;
  o.windows_s = {1.0};
  auto blocks = CutIntoBlocks(trace, 4.0, o);
  ASSERT_TRUE(blocks.ok()) << blocks.error().message();
  ASSERT_EQ(blocks->size(), 2u);  // [0,4) and [4,8): the last ends at 7 + dt = 8
  // Block 0: samples 0..3 at 100 W, trapezoid 3 s x 100 W = 300 J; 40 tokens.
  EXPECT_DOUBLE_EQ((*blocks)[0].energy_j, 300.0);
  EXPECT_DOUBLE_EQ(*(*blocks)[0].tokens, 40.0);
  EXPECT_DOUBLE_EQ(*(*blocks)[0].TokensPerMwh(), 40.0 / (300.0 / 3.6e9));
  EXPECT_DOUBLE_EQ(*(*blocks)[0].ViolationFraction(0), 0.0);
  EXPECT_DOUBLE_EQ(*(*blocks)[1].ViolationFraction(0), 1.0);
  EXPECT_DOUBLE_EQ(*(*blocks)[1].Value(Metric::kEnergy), 900.0 / 3.6e9);
  // Without a budget no violations.
  auto plain = CutIntoBlocks(trace, 4.0, MeasureOptions{});
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE((*plain)[0].Value(Metric::kViolations));
  // A block longer than the trace: none.
  EXPECT_TRUE(CutIntoBlocks(trace, 100.0, o)->empty());
}

// ---------------------------------------------------------------------------------------------
// BLOCKS.csv and the judgement.

TEST(BlocksCsv, ParsesAndRefusesInOneLine) {
  const auto rows = ParseBlocksCsv(
      "# a pilot\nblock,arm,trace,job,start_s,end_s\n1,controlled,a.csv,j1,0,60\n"
      "1,controlled,b.csv,j2,,\n2,uncontrolled,a.csv,j1,60,120\n",
      "B.csv");
  ASSERT_TRUE(rows.ok()) << rows.error().message();
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ((*rows)[0].line, 3);
  EXPECT_EQ((*rows)[1].job, "j2");
  EXPECT_FALSE((*rows)[1].start_s);
  EXPECT_DOUBLE_EQ(*(*rows)[2].end_s, 120.0);

  const auto bad_arm = ParseBlocksCsv("block,arm,trace\n1,treated,a.csv\n", "B.csv");
  ASSERT_FALSE(bad_arm.ok());
  EXPECT_EQ(bad_arm.error().message(),
            "B.csv:2:2: column 'arm': 'treated' is not controlled or uncontrolled");
  const auto mixed =
      ParseBlocksCsv("block,arm,trace\n1,controlled,a.csv\n1,uncontrolled,b.csv\n", "B.csv");
  ASSERT_FALSE(mixed.ok());
  EXPECT_THAT(mixed.error().message(), HasSubstr("B.csv:3:2"));
  const auto no_trace = ParseBlocksCsv("block,arm\n1,controlled\n", "B.csv");
  ASSERT_FALSE(no_trace.ok());
  EXPECT_THAT(no_trace.error().message(), HasSubstr("no 'trace' column"));
  const auto bad_number =
      ParseBlocksCsv("block,arm,trace,start_s,end_s\n1,controlled,a.csv,0,nan\n", "B.csv");
  ASSERT_FALSE(bad_number.ok());
  EXPECT_THAT(bad_number.error().message(), HasSubstr("B.csv:2:5: column 'end_s'"));
  EXPECT_FALSE(ParseBlocksCsv("block,arm,trace\n1,controlled\n", "B.csv").ok());
  EXPECT_FALSE(ParseBlocksCsv("", "B.csv").ok());
}

BlockStats Stats(double energy_mwh, double tokens) {
  BlockStats b;
  b.duration_s = 3600.0;
  b.energy_j = energy_mwh * 3.6e9;
  b.tokens = tokens;
  b.has_budget = true;
  b.windows_counted = {100, 10, 2};
  b.windows_over = {5, 1, 0};
  return b;
}

TEST(Judge, EffectsPerMetricAndPerJob) {
  std::vector<BlockRow> rows;
  std::vector<BlockStats> stats;
  // Four controlled blocks at 0.9 MWh, four uncontrolled at 1.0 MWh, one job each block.
  for (int i = 0; i < 8; ++i) {
    BlockRow r;
    r.block = std::to_string(i);
    r.arm = i % 2 ? Arm::kUncontrolled : Arm::kControlled;
    r.trace = "t.csv";
    r.job = "j";
    rows.push_back(r);
    stats.push_back(Stats(i % 2 ? 1.0 : 0.9, 1e6));
  }
  JudgeOptions o;
  o.effect.bootstrap_resamples = 200;
  const auto rep = JudgePilot(rows, stats, o);
  ASSERT_TRUE(rep.ok()) << rep.error().message();
  ASSERT_EQ(rep->jobs.size(), 1u);
  const auto find = [&](const std::string& name) {
    for (const auto& m : rep->all.metrics) {
      if (m.name == name) return m.effect;
    }
    ADD_FAILURE() << name;
    return Effect{};
  };
  EXPECT_NEAR(*find("energy_mwh").effect_pct, -10.0, 1e-9);
  EXPECT_NEAR(*find("cost_usd").effect_pct, -10.0, 1e-9);
  EXPECT_NEAR(find("cost_usd").difference, -0.1 * 80.0, 1e-9);
  EXPECT_NEAR(find("carbon_kg").difference, -0.1 * 250.0, 1e-9);
  // tokens/MWh: 1e6 / 0.9 against 1e6 / 1.0: +11.11 %.
  EXPECT_NEAR(*find("tokens_per_mwh").effect_pct, 100.0 * (1.0 / 0.9 - 1.0), 1e-9);
  EXPECT_DOUBLE_EQ(find("violations_0.5s").controlled_mean, 0.05);
  // Perfect separation of 4 + 4: the exact p = 2/70.
  EXPECT_DOUBLE_EQ(find("energy_mwh").permutation.p_value, 2.0 / 70.0);
  EXPECT_TRUE(find("energy_mwh").significant);
  // One controlled block: refused.
  const std::vector<BlockRow> few(rows.begin(), rows.begin() + 3);
  const std::vector<BlockStats> few_stats(stats.begin(), stats.begin() + 3);
  const auto refused = JudgePilot(few, few_stats, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.error().message(), HasSubstr("2 controlled and 1 uncontrolled"));
}

}  // namespace
}  // namespace headroom::pilot
