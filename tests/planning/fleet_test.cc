#include "planning/fleet.h"

#include <gtest/gtest.h>

#include <cmath>

namespace headroom::planning {
namespace {

// A one-GPU job sampled every second with the given powers (and tokens, when given).
Job OneGpuJob(const std::string& name, std::vector<double> power_w, uint32_t copies,
              double nameplate_w, std::vector<double> tokens = {}) {
  trace::CollectingSink::Series s;
  for (size_t i = 0; i < power_w.size(); ++i) s.t_s.push_back(static_cast<double>(i));
  s.power_w = std::move(power_w);
  const bool has_tokens = !tokens.empty();
  s.tokens = std::move(tokens);
  auto job = MakeJob(name, copies, {s}, has_tokens, nameplate_w);
  EXPECT_TRUE(job.ok());
  return std::move(job).value();
}

TEST(Fleet, AlignedCompositionByHand) {
  // Job A: 100, 200, 300, 400 W for 4 s (nameplate 500 W). Job B: 10 W for 6 s, two copies
  // (100 W each). D = 4 s, dt 1 s; fleet = 120, 220, 320, 420 W; nameplate 700 W.
  std::vector<Job> jobs;
  jobs.push_back(OneGpuJob("a", {100, 200, 300, 400}, 1, 500));
  jobs.push_back(OneGpuJob("b", {10, 10, 10, 10, 10, 10}, 2, 100));
  FleetOptions o;
  o.offsets = Offsets::kNone;
  o.trials = 3;
  o.windows_s = {1.0, 2.0};
  o.risk_window_s = 2.0;
  o.budget_w = 300.0;
  auto r = Compose(jobs, o);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->gpus, 3u);
  EXPECT_DOUBLE_EQ(r->nameplate_w, 700.0);
  EXPECT_DOUBLE_EQ(r->duration_s, 4.0);
  EXPECT_DOUBLE_EQ(r->dt_s, 1.0);
  ASSERT_EQ(r->windows.size(), 2u);
  EXPECT_DOUBLE_EQ(*r->windows[0].peak_fraction_max, 420.0 / 700.0);
  EXPECT_DOUBLE_EQ(*r->windows[0].peak_fraction_p50, 420.0 / 700.0);
  EXPECT_DOUBLE_EQ(*r->windows[0].violation_fraction, 0.5);  // 320 and 420 of 4
  // 2 s windows: 170 and 370 W.
  EXPECT_DOUBLE_EQ(*r->windows[1].peak_fraction_max, 370.0 / 700.0);
  EXPECT_DOUBLE_EQ(*r->windows[1].violation_fraction, 0.5);
  // Oversubscription: 700 / (370 x 1.05).
  EXPECT_DOUBLE_EQ(r->risk_peak_w, 370.0);
  EXPECT_NEAR(r->oversubscription_factor, 700.0 / (370.0 * 1.05), 1e-12);
  // Money and carbon: 1080 J over the 4 s = 3e-7 MWh.
  const auto& e = r->economics;
  EXPECT_NEAR(e.energy_mwh, 1080.0 / 3.6e9, 1e-18);
  EXPECT_NEAR(e.energy_cost_usd, 80.0 * 1080.0 / 3.6e9, 1e-15);
  EXPECT_NEAR(e.carbon_kg, 1080.0 / 3.6e6 * 0.25, 1e-15);  // kWh x 0.25 kg/kWh
  EXPECT_NEAR(e.freed_capacity_kw, (700.0 - 370.0 * 1.05) / 1e3, 1e-12);
  EXPECT_NEAR(e.freed_capacity_usd_per_year, (700.0 - 370.0 * 1.05) / 1e3 * 1000.0, 1e-9);
  EXPECT_FALSE(e.tokens.has_value());
  EXPECT_FALSE(e.usd_per_million_tokens.has_value());
}

TEST(Fleet, BudgetFractionIsOfNameplate) {
  std::vector<Job> jobs;
  jobs.push_back(OneGpuJob("a", {100, 200, 300, 400}, 1, 500));
  FleetOptions o;
  o.offsets = Offsets::kNone;
  o.trials = 1;
  o.windows_s = {1.0};
  o.risk_window_s = 1.0;
  o.budget_fraction = 0.5;  // 250 W
  auto r = Compose(jobs, o);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(*r->budget_w, 250.0);
  EXPECT_DOUBLE_EQ(*r->windows[0].violation_fraction, 0.5);
}

TEST(Fleet, RandomOffsetsPermuteEachCopyAndKeepEnergy) {
  // A wrapped copy visits every grid point of its first D seconds once, whatever its offset, so
  // energy and tokens do not depend on the offsets; peaks do.
  std::vector<double> p;
  std::vector<double> tokens;
  for (int i = 0; i < 600; ++i) {
    p.push_back(i % 60 < 10 ? 700.0 : 200.0);  // a 10 s burst every minute
    tokens.push_back(i % 60 < 10 ? 0.0 : 3.0);
  }
  std::vector<Job> jobs;
  jobs.push_back(OneGpuJob("burst", p, 8, 700, tokens));
  FleetOptions aligned;
  aligned.offsets = Offsets::kNone;
  aligned.trials = 1;
  aligned.windows_s = {1.0, 30.0};
  FleetOptions random = aligned;
  random.offsets = Offsets::kRandom;
  random.trials = 50;
  random.seed = 9;
  auto a = Compose(jobs, aligned);
  auto r = Compose(jobs, random);
  ASSERT_TRUE(a.ok() && r.ok());
  EXPECT_NEAR(r->economics.energy_mwh, a->economics.energy_mwh, 1e-12);
  EXPECT_DOUBLE_EQ(*r->economics.tokens, 8 * 500 * 3.0);
  EXPECT_DOUBLE_EQ(*a->economics.tokens, 8 * 500 * 3.0);
  // Aligned bursts stack: 8 x 700 W at 1 s is the whole nameplate.
  EXPECT_DOUBLE_EQ(*a->windows[0].peak_fraction_max, 1.0);
  // Random starts spread them: the median trial peaks lower; order statistics are ordered.
  const auto& w = r->windows[0];
  EXPECT_LT(*w.peak_fraction_p50, 1.0);
  EXPECT_LE(*w.peak_fraction_p50, *w.peak_fraction_p95);
  EXPECT_LE(*w.peak_fraction_p95, *w.peak_fraction_max);
  EXPECT_EQ(w.peak_fractions.size(), 50u);
  // Same seed, same answer.
  auto again = Compose(jobs, random);
  EXPECT_EQ(again->windows[0].peak_fractions, w.peak_fractions);
}

TEST(Fleet, TokensCountTheFirstDSeconds) {
  std::vector<Job> jobs;
  jobs.push_back(OneGpuJob("a", {1, 1, 1, 1}, 1, 10, {1, 2, 3, 4}));  // D = 4
  jobs.push_back(OneGpuJob("b", {1, 1, 1, 1, 1, 1}, 2, 10, {1, 1, 1, 1, 100, 100}));
  FleetOptions o;
  o.offsets = Offsets::kNone;
  o.trials = 1;
  o.windows_s = {1.0};
  o.risk_window_s = 1.0;
  auto r = Compose(jobs, o);
  ASSERT_TRUE(r.ok());
  // a: 1+2+3+4 = 10; b: the samples at t < 4 s: 4 each, two copies.
  EXPECT_DOUBLE_EQ(*r->economics.tokens, 10.0 + 2 * 4.0);
  EXPECT_NEAR(*r->economics.usd_per_million_tokens, r->economics.energy_cost_usd / 18e-6, 1e-9);
}

TEST(Fleet, AJobWhoseTimesRepeatIsRefusedAsAnalyzeRefusesIt) {
  trace::CollectingSink::Series s;
  for (int i = 0; i < 40; ++i) {
    s.t_s.push_back(static_cast<double>(i / 4));
    s.power_w.push_back(100.0);
  }
  auto job = MakeJob("coarse", 1, {s}, false, 500.0);
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.error().message().find("coarse: field 't_s': 30 of 39 steps repeat"),
            std::string::npos)
      << job.error().message();
}

TEST(Fleet, OptionErrors) {
  std::vector<Job> jobs;
  jobs.push_back(OneGpuJob("a", {1, 2, 3, 4}, 1, 10));
  FleetOptions o;
  o.risk_window_s = 60.0;  // longer than the 4 s fleet
  EXPECT_FALSE(Compose(jobs, o).ok());
  o.risk_window_s = 1.0;
  o.trials = 0;
  EXPECT_FALSE(Compose(jobs, o).ok());
  o.trials = 1;
  o.quantile = 1.5;
  EXPECT_FALSE(Compose(jobs, o).ok());
  std::vector<Job> none;
  EXPECT_FALSE(Compose(none, FleetOptions{}).ok());
}

}  // namespace
}  // namespace headroom::planning
