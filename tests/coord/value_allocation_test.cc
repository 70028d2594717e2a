// Value-based allocation against answers computed by hand, and against the proportional split
// on random concave curves (water-filling on concave curves makes at least as many tokens as
// any other split of the same watts).
#include "coord/value_allocation.h"

#include <gtest/gtest.h>

#include <random>

#include "coord/plan.h"

namespace headroom::coord {
namespace {

// A: 1 token/s per W from 100 to 300 W, then 0.25; B: 0.5 from 100 to 500 W.
std::map<std::string, ValueJob> TwoJobs() {
  return {{"a", {100, 500, {{100, 0}, {300, 200}, {500, 250}}}},
          {"b", {100, 500, {{500, 200}, {100, 0}}}}};
}

TEST(AllocateByValue, TheSteepestSegmentsFirst) {
  // 400 W above the floors: A's 200 W at slope 1, then 200 of B's 400 W at 0.5.
  auto a = AllocateByValue(600, TwoJobs(), Fairness::kNone);
  EXPECT_NEAR(a["a"], 300, 1e-9);
  EXPECT_NEAR(a["b"], 300, 1e-9);
  // 700 W: A's first 200, all of B's 400, then 100 of A's slope 0.25.
  a = AllocateByValue(900, TwoJobs(), Fairness::kNone);
  EXPECT_NEAR(a["a"], 400, 1e-9);
  EXPECT_NEAR(a["b"], 500, 1e-9);
  // More than every demand: capped at demand.
  a = AllocateByValue(5000, TwoJobs(), Fairness::kNone);
  EXPECT_NEAR(a["a"], 500, 1e-9);
  EXPECT_NEAR(a["b"], 500, 1e-9);
  // Only the floors.
  a = AllocateByValue(200, TwoJobs(), Fairness::kNone);
  EXPECT_NEAR(a["a"], 100, 1e-9);
  EXPECT_NEAR(a["b"], 100, 1e-9);
}

TEST(AllocateByValue, MaxMinGivesEveryJobTheSameFractionOfItsGainFirst) {
  // Level L: A makes 250 L tokens/s on 100 + 250 L W (slope 1 up to 200 tokens/s), B 200 L on
  // 100 + 400 L W. 650 L = 400 W: L = 8/13.
  auto a = AllocateByValue(600, TwoJobs(), Fairness::kMaxMin);
  EXPECT_NEAR(a["a"], 100 + 250.0 * 8 / 13, 1e-6);
  EXPECT_NEAR(a["b"], 100 + 400.0 * 8 / 13, 1e-6);
  // Room for every job's whole gain: the demands.
  a = AllocateByValue(1000, TwoJobs(), Fairness::kMaxMin);
  EXPECT_NEAR(a["a"], 500, 1e-6);
  EXPECT_NEAR(a["b"], 500, 1e-6);
}

TEST(AllocateByValue, EqualSlopesShareAndFlatCurvesTakeWhatIsLeftByDemand) {
  std::map<std::string, ValueJob> same = {{"c", {0, 100, {{0, 0}, {100, 100}}}},
                                          {"d", {0, 100, {{0, 0}, {100, 100}}}}};
  auto a = AllocateByValue(100, same, Fairness::kNone);
  EXPECT_NEAR(a["c"], 50, 1e-9);
  EXPECT_NEAR(a["d"], 50, 1e-9);
  std::map<std::string, ValueJob> flat = {{"e", {0, 100, {}}}, {"f", {0, 300, {}}}};
  a = AllocateByValue(200, flat, Fairness::kNone);
  EXPECT_NEAR(a["e"], 50, 1e-9);
  EXPECT_NEAR(a["f"], 150, 1e-9);
}

TEST(ConcaveCurve, MonotoneThenTheUpperHullFromFloorToDemand) {
  auto c = ConcaveCurve({0, 100, {{0, 0}, {50, 10}, {100, 100}}});  // convex: the chord
  ASSERT_EQ(c.size(), 2u);
  EXPECT_DOUBLE_EQ(c[1].budget_w, 100);
  EXPECT_DOUBLE_EQ(c[1].tokens_per_s, 100);
  c = ConcaveCurve({0, 100, {{0, 0}, {50, 60}, {100, 40}}});  // a dip is noise
  ASSERT_EQ(c.size(), 3u);
  EXPECT_DOUBLE_EQ(c[2].tokens_per_s, 60);
  c = ConcaveCurve({25, 150, {{0, 0}, {50, 50}, {100, 75}, {400, 90}}});
  ASSERT_EQ(c.size(), 4u);  // the floor interpolated, the last in-range point, flat to demand
  EXPECT_DOUBLE_EQ(c[0].budget_w, 25);
  EXPECT_DOUBLE_EQ(c[0].tokens_per_s, 25);
  EXPECT_DOUBLE_EQ(c[2].budget_w, 100);
  EXPECT_DOUBLE_EQ(c[3].budget_w, 150);
  EXPECT_DOUBLE_EQ(c[3].tokens_per_s, 75);
  EXPECT_DOUBLE_EQ(CurveTokensPerS(c, 75), 62.5);
  EXPECT_DOUBLE_EQ(CurveTokensPerS(c, 1000), 75);
  c = ConcaveCurve({10, 20, {}});
  ASSERT_EQ(c.size(), 2u);
  EXPECT_DOUBLE_EQ(c[1].tokens_per_s, 0);
}

TEST(AllocateByValue, RandomSitesNeverBeatenByTheProportionalSplit) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 300; ++trial) {
    std::map<std::string, ValueJob> jobs;
    std::map<std::string, AllocationJob> prop;
    double floors_w = 0.0, demands_w = 0.0;
    const int n = 1 + static_cast<int>(u(rng) * 8);
    for (int j = 0; j < n; ++j) {
      ValueJob v;
      v.floor_w = 50 + 200 * u(rng);
      v.demand_w = v.floor_w + 600 * u(rng);
      double t = 0.0, slope = 2 * u(rng);
      for (double b = v.floor_w; b <= v.demand_w + 1e-9; b += (v.demand_w - v.floor_w) / 4 + 1) {
        v.curve.push_back({b, t});
        t += slope * ((v.demand_w - v.floor_w) / 4 + 1);
        slope *= u(rng);  // concave
      }
      floors_w += v.floor_w;
      demands_w += v.demand_w;
      const std::string name(1, static_cast<char>('a' + j));
      prop[name] = {v.floor_w, v.demand_w};
      jobs[name] = std::move(v);
    }
    const double available_w = floors_w + u(rng) * (demands_w - floors_w) * 1.2;
    for (Fairness f : {Fairness::kNone, Fairness::kMaxMin}) {
      const auto a = AllocateByValue(available_w, jobs, f);
      const auto p = Allocate(available_w, prop);
      double sum_w = 0.0, tokens = 0.0, tokens_prop = 0.0;
      for (const auto& [name, job] : jobs) {
        EXPECT_GE(a.at(name), job.floor_w - 1e-9);
        EXPECT_LE(a.at(name), job.demand_w + 1e-9);
        sum_w += a.at(name);
        const auto c = ConcaveCurve(job);
        tokens += CurveTokensPerS(c, a.at(name));
        tokens_prop += CurveTokensPerS(c, p.at(name));
      }
      EXPECT_LE(sum_w, std::max(available_w, floors_w) + 1e-6);
      if (f == Fairness::kNone) {
        EXPECT_GE(tokens, tokens_prop - 1e-6) << "trial " << trial;
      }
    }
  }
}

}  // namespace
}  // namespace headroom::coord
