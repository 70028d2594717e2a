#include "analysis/window_stats.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace headroom::analysis {
namespace {

struct Series {
  std::vector<double> t_s, power_w;
};

WindowStats RunWindows(const Series& s, double window_s, std::optional<double> budget_w,
                       double dt_s, bool track_ramp = false) {
  WindowStats w(window_s, budget_w, track_ramp);
  for (size_t i = 0; i < s.t_s.size(); ++i) w.Add(s.t_s[i], s.power_w[i]);
  w.Finish(dt_s);
  return w;
}

// t = 0..9 s, p = 10..100 W.
Series Ramp10() {
  Series s;
  for (int i = 0; i < 10; ++i) {
    s.t_s.push_back(i);
    s.power_w.push_back(10.0 * (i + 1));
  }
  return s;
}

TEST(WindowStats, WindowsOfTwoAndAHalfSeconds) {
  // k = floor(t / 2.5): {0,1,2} {3,4} {5,6,7} {8,9}; means 20, 45, 70, 95. The last window ends
  // at 10 <= last time 9 + dt 1: it counts.
  const auto w = RunWindows(Ramp10(), 2.5, 50.0, 1.0);
  EXPECT_EQ(w.counted(), 4u);
  EXPECT_EQ(w.over_budget(), 2u);  // 70 and 95
  EXPECT_DOUBLE_EQ(*w.max_power_w(), 95.0);
}

TEST(WindowStats, PartialLastWindowDoesNotCount) {
  // W = 4: {0..3} mean 25, {4..7} mean 65, {8,9} ends at 12 > 9 + 1: not counted.
  const auto w = RunWindows(Ramp10(), 4.0, 60.0, 1.0);
  EXPECT_EQ(w.counted(), 2u);
  EXPECT_EQ(w.over_budget(), 1u);
  EXPECT_DOUBLE_EQ(*w.max_power_w(), 65.0);
}

TEST(WindowStats, EmptyWindowsAcrossAGapAreNotWindows) {
  // t = 0,1,2 then 10,11; W = 2: windows 0 {0,1}, 1 {2}, 5 {10,11}; nothing for 2..4.
  const Series s{{0, 1, 2, 10, 11}, {100, 200, 300, 400, 600}};
  const auto w = RunWindows(s, 2.0, 250.0, 1.0);
  EXPECT_EQ(w.counted(), 3u);
  EXPECT_EQ(w.over_budget(), 2u);  // 300 and 500
  EXPECT_DOUBLE_EQ(*w.max_power_w(), 500.0);
}

TEST(WindowStats, WindowsAlignAtTheFirstSample) {
  // t0 = 100.5; W = 1: window 0 = {100.5, 101.2} (mean 2), window 1 = {101.5} (mean 10), which
  // ends at 102.5: it counts only if last time + dt >= 102.5.
  const Series s{{100.5, 101.2, 101.5}, {1, 3, 10}};
  const auto short_dt = RunWindows(s, 1.0, std::nullopt, 0.5);
  EXPECT_EQ(short_dt.counted(), 1u);
  EXPECT_DOUBLE_EQ(*short_dt.max_power_w(), 2.0);
  const auto long_dt = RunWindows(s, 1.0, std::nullopt, 1.0);
  EXPECT_EQ(long_dt.counted(), 2u);
  EXPECT_DOUBLE_EQ(*long_dt.max_power_w(), 10.0);
}

TEST(WindowStats, SampleOnABoundaryBelongsToTheLaterWindow) {
  // 0.1 * 3 = 0.30000000000000004 and 0.3 both start window 3 of W = 0.1:
  // (0.3 - 0) / 0.1 = 2.9999999999999996, and + 1e-9 lifts it to 3.
  EXPECT_EQ(WindowStats::WindowIndex(0.3, 0.0, 0.1), 3);
  EXPECT_EQ(WindowStats::WindowIndex(0.1 * 3, 0.0, 0.1), 3);
  EXPECT_EQ(WindowStats::WindowIndex(0.2999, 0.0, 0.1), 2);
  // So a 10 Hz series in 0.5 s windows has exactly five samples in every window.
  Series s;
  for (int i = 0; i < 50; ++i) {
    s.t_s.push_back(i * 0.1);
    s.power_w.push_back(i % 5 == 0 ? 100.0 : 0.0);  // the first sample of each window
  }
  const auto w = RunWindows(s, 0.5, 19.0, 0.1);
  EXPECT_EQ(w.counted(), 10u);
  EXPECT_EQ(w.over_budget(), 10u);  // every window's mean is exactly 20
  EXPECT_DOUBLE_EQ(*w.max_power_w(), 20.0);
}

TEST(WindowStats, RampIsTheLargestStepBetweenAdjacentCountedWindows) {
  // 1 s windows with means 10, 30, 20, then a gap, then 100 (not adjacent: no ramp to it).
  const Series s{{0, 0.5, 1, 1.5, 2, 2.5, 9, 9.5}, {10, 10, 30, 30, 20, 20, 100, 100}};
  const auto w = RunWindows(s, 1.0, std::nullopt, 0.5, /*track_ramp=*/true);
  ASSERT_TRUE(w.max_ramp_w_per_s().has_value());
  EXPECT_DOUBLE_EQ(*w.max_ramp_w_per_s(), 20.0);
}

TEST(WindowStats, NoSamplesNoWindows) {
  WindowStats w(1.0, 10.0);
  w.Finish(1.0);
  EXPECT_EQ(w.counted(), 0u);
  EXPECT_FALSE(w.max_power_w().has_value());
}

TEST(WindowStats, AddBatchDecidesLikeAdd) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> step(0.0, 0.3), power(0.0, 500.0);
  Series s;
  double t = 3.7;
  for (int i = 0; i < 20000; ++i) {
    t += (i % 997 == 0) ? 40.0 : step(rng);  // a few gaps
    s.t_s.push_back(t);
    s.power_w.push_back(power(rng));
  }
  for (double window_s : {0.5, 1.0, 7.0, 30.0}) {
    const auto one = RunWindows(s, window_s, 250.0, 0.15, true);
    WindowStats batched(window_s, 250.0, true);
    for (size_t i = 0; i < s.t_s.size(); i += 333) {
      const size_t n = std::min<size_t>(333, s.t_s.size() - i);
      batched.AddBatch(&s.t_s[i], &s.power_w[i], n);
    }
    batched.Finish(0.15);
    EXPECT_EQ(batched.counted(), one.counted()) << window_s;
    EXPECT_EQ(batched.over_budget(), one.over_budget()) << window_s;
    EXPECT_NEAR(*batched.max_power_w(), *one.max_power_w(), 1e-9) << window_s;
    EXPECT_NEAR(*batched.max_ramp_w_per_s(), *one.max_ramp_w_per_s(), 1e-9) << window_s;
  }
}

// Feeds series that share their times through AddPolls, `chunk` polls per call.
std::vector<WindowStats> RunPolls(const std::vector<double>& t_s,
                                  const std::vector<std::vector<double>>& lanes, double window_s,
                                  std::optional<double> budget_w, double dt_s, size_t chunk) {
  const size_t lane_count = lanes.size();
  std::vector<WindowStats> out;
  for (size_t g = 0; g < lane_count; ++g) out.emplace_back(window_s, budget_w, true);
  std::vector<WindowStats*> pointers;
  for (auto& w : out) pointers.push_back(&w);
  std::vector<double> rows;  // poll-major
  for (size_t r = 0; r < t_s.size(); ++r) {
    for (size_t g = 0; g < lane_count; ++g) rows.push_back(lanes[g][r]);
  }
  for (size_t r = 0; r < t_s.size(); r += chunk) {
    const size_t n = std::min(chunk, t_s.size() - r);
    WindowStats::AddPolls(pointers.data(), lane_count, &t_s[r], &rows[r * lane_count], n);
  }
  for (auto& w : out) w.Finish(dt_s);
  return out;
}

TEST(WindowStats, PollsOfTwoSeriesByHand) {
  // t = 0..9 s; 2.5 s windows {0,1,2} {3,4} {5,6,7} {8,9}, all counted (10 <= 9 + 1).
  // Lane 0: 10..100 W -> means 20, 45, 70, 95; over 50 W: 2; ramps 25 / 2.5 = 10 W/s.
  // Lane 1: 0 0 0 0 0 100 100 100 0 0 -> means 0, 0, 100, 0; over 50 W: 1; ramp 100 / 2.5.
  const Series ramp = Ramp10();
  const std::vector<double> pulse = {0, 0, 0, 0, 0, 100, 100, 100, 0, 0};
  for (size_t chunk : {1u, 3u, 10u}) {
    const auto w = RunPolls(ramp.t_s, {ramp.power_w, pulse}, 2.5, 50.0, 1.0, chunk);
    EXPECT_EQ(w[0].counted(), 4u) << chunk;
    EXPECT_EQ(w[0].over_budget(), 2u) << chunk;
    EXPECT_DOUBLE_EQ(*w[0].max_power_w(), 95.0) << chunk;
    EXPECT_DOUBLE_EQ(*w[0].max_ramp_w_per_s(), 10.0) << chunk;
    EXPECT_EQ(w[1].counted(), 4u) << chunk;
    EXPECT_EQ(w[1].over_budget(), 1u) << chunk;
    EXPECT_DOUBLE_EQ(*w[1].max_power_w(), 100.0) << chunk;
    EXPECT_DOUBLE_EQ(*w[1].max_ramp_w_per_s(), 40.0) << chunk;
  }
}

TEST(WindowStats, PollsDecideLikeEachSeriesAlone) {
  // Times on a 0.1 s grid built by repeated addition land within rounding of window ends (the
  // windows that wait for a later sample), plus gaps; 3 lanes (any count) and 8 (unrolled).
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> power(0.0, 500.0);
  std::vector<double> t_s;
  double t = 0.0;
  for (int i = 0; i < 6000; ++i) {
    t += (i % 1499 == 1498) ? 25.0 : 0.1;
    t_s.push_back(t);
  }
  for (size_t lane_count : {3u, 8u}) {
    std::vector<std::vector<double>> lanes(lane_count, std::vector<double>(t_s.size()));
    for (auto& lane : lanes) {
      for (double& p : lane) p = power(rng);
    }
    for (double window_s : {0.3, 0.5, 1.0, 7.0}) {
      const auto polled = RunPolls(t_s, lanes, window_s, 250.0, 0.1, 257);
      for (size_t g = 0; g < lane_count; ++g) {
        const auto alone = RunWindows({t_s, lanes[g]}, window_s, 250.0, 0.1, true);
        EXPECT_EQ(polled[g].counted(), alone.counted()) << window_s << " lane " << g;
        EXPECT_EQ(polled[g].over_budget(), alone.over_budget()) << window_s << " lane " << g;
        EXPECT_NEAR(*polled[g].max_power_w(), *alone.max_power_w(), 1e-9) << window_s;
        EXPECT_NEAR(*polled[g].max_ramp_w_per_s(), *alone.max_ramp_w_per_s(), 1e-9) << window_s;
      }
    }
  }
}

}  // namespace
}  // namespace headroom::analysis
