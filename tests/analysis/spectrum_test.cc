#include "analysis/spectrum.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>
#include <vector>

namespace headroom::analysis {
namespace {

constexpr double kPi = std::numbers::pi;

// Feeds one series sampled every dt_s and returns the pooled result.
SpectrumResult Spectrum(const std::vector<double>& power_w, double dt_s, double lo = 0.1,
                        double hi = 20.0) {
  SpectrumPool pool;
  WelchAccumulator welch(&pool);
  std::vector<double> t(power_w.size());
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<double>(i) * dt_s;
  welch.AddBatch(t.data(), power_w.data(), t.size());
  welch.Finish();
  return pool.Result(dt_s, lo, hi);
}

TEST(Spectrum, SineInsideTheBandCarriesAllTheVariance) {
  // 2 Hz, amplitude 10 W around 300 W, sampled at 100 Hz for 200 s.
  std::vector<double> p(20000);
  for (size_t i = 0; i < p.size(); ++i) p[i] = 300.0 + 10.0 * std::sin(2 * kPi * 2.0 * i * 0.01);
  const auto r = Spectrum(p, 0.01);
  ASSERT_TRUE(r.band_fraction.has_value());
  EXPECT_GT(*r.band_fraction, 0.99);
  EXPECT_NEAR(*r.dominant_hz, 2.0, 100.0 / 4096);  // within one bin
  EXPECT_DOUBLE_EQ(r.band_hi_hz, 20.0);
}

TEST(Spectrum, BandFractionSplitsTwoSinesByTheirVariance) {
  // 0.02 Hz (amplitude 10, variance 50) below the band, 1 Hz (amplitude 5, variance 12.5) in it:
  // the band holds 12.5 / 62.5 = 20 % of the variance. 10 Hz for 2000 s.
  std::vector<double> p(20000);
  for (size_t i = 0; i < p.size(); ++i) {
    const double t = i * 0.1;
    p[i] = 10.0 * std::sin(2 * kPi * 0.02 * t) + 5.0 * std::sin(2 * kPi * 1.0 * t);
  }
  const auto r = Spectrum(p, 0.1);
  EXPECT_NEAR(*r.band_fraction, 0.2, 0.01);
  EXPECT_DOUBLE_EQ(r.band_hi_hz, 5.0);  // clipped at Nyquist
}

TEST(Spectrum, WhiteNoiseSpreadsEvenlyUpToNyquist) {
  // At 100 Hz the band 0.1-20 Hz is (20 - 0.1) / 50 of a flat spectrum.
  std::mt19937_64 rng(3);
  std::normal_distribution<double> noise(0.0, 1.0);
  std::vector<double> p(200000);
  for (double& x : p) x = 200.0 + noise(rng);
  const auto r = Spectrum(p, 0.01);
  EXPECT_NEAR(*r.band_fraction, 19.9 / 50.0, 0.01);
}

TEST(Spectrum, ShortSeriesIsOneZeroPaddedSegment) {
  // 500 samples at 10 Hz of a 1 Hz sine: fewer than one segment.
  std::vector<double> p(500);
  for (size_t i = 0; i < p.size(); ++i) p[i] = std::sin(2 * kPi * 1.0 * i * 0.1);
  const auto r = Spectrum(p, 0.1);
  EXPECT_GT(*r.band_fraction, 0.95);
  EXPECT_NEAR(*r.dominant_hz, 1.0, 0.01);
}

TEST(Spectrum, ConstantSeriesHasNoFraction) {
  const auto r = Spectrum(std::vector<double>(10000, 250.0), 0.1);
  EXPECT_FALSE(r.band_fraction.has_value());
}

TEST(Spectrum, GapsDropTheSegmentsHoldingThem) {
  // Two 1 Hz sine runs at 10 Hz separated by a 1000 s gap: the spectrum sees only sine.
  SpectrumPool pool;
  WelchAccumulator welch(&pool);
  std::vector<double> t, p;
  for (int run = 0; run < 2; ++run) {
    for (int i = 0; i < 6000; ++i) {
      t.push_back(run * 2000.0 + i * 0.1);
      p.push_back(100.0 + std::sin(2 * kPi * 1.0 * i * 0.1) + run * 50.0);
    }
  }
  welch.AddBatch(t.data(), p.data(), t.size());
  welch.Finish();
  EXPECT_EQ(pool.segments(), 2u);  // one per run: no segment straddles the gap
  const auto r = pool.Result(0.1, 0.1, 20.0);
  EXPECT_NEAR(*r.dominant_hz, 1.0, 0.01);
}

// Feeds series that share their times through AddPolls, `chunk` polls per call.
void FeedPolls(SpectrumPool& pool, const std::vector<double>& t_s,
               const std::vector<std::vector<double>>& lanes, size_t chunk) {
  const size_t lane_count = lanes.size();
  std::vector<WelchAccumulator> welch(lane_count, WelchAccumulator(&pool));
  std::vector<WelchAccumulator*> pointers;
  for (auto& w : welch) pointers.push_back(&w);
  std::vector<double> rows;
  for (size_t r = 0; r < t_s.size(); ++r) {
    for (size_t g = 0; g < lane_count; ++g) rows.push_back(lanes[g][r]);
  }
  for (size_t r = 0; r < t_s.size(); r += chunk) {
    const size_t n = std::min(chunk, t_s.size() - r);
    WelchAccumulator::AddPolls(pointers.data(), lane_count, &t_s[r], &rows[r * lane_count], n);
  }
  for (auto& w : welch) w.Finish();
}

TEST(Spectrum, PollsOfTwoSeriesSplitTheVarianceByHand) {
  // Lane 0: 1 Hz sine (in the band), lane 1: 0.02 Hz sine (below it), both amplitude 10
  // (variance 50 each): the band holds 50 / 100 of the pooled variance. 10 Hz for 4000 s.
  std::vector<double> t(40000);
  std::vector<std::vector<double>> lanes(2, std::vector<double>(t.size()));
  for (size_t i = 0; i < t.size(); ++i) {
    t[i] = static_cast<double>(i) * 0.1;
    lanes[0][i] = 300.0 + 10.0 * std::sin(2 * kPi * 1.0 * t[i]);
    lanes[1][i] = 200.0 + 10.0 * std::sin(2 * kPi * 0.02 * t[i]);
  }
  SpectrumPool pool;
  FeedPolls(pool, t, lanes, 1000);
  const auto r = pool.Result(0.1, 0.1, 20.0);
  EXPECT_NEAR(*r.band_fraction, 0.5, 0.01);
  // Per lane, a segment every 2048 samples after the first 4096: 2 x (40000 / 2048 - 1).
  EXPECT_EQ(pool.segments(), 2u * (40000 / 2048 - 1));
}

TEST(Spectrum, PollsGiveWhatEachSeriesAloneGives) {
  // Eight noisy lanes with a gap, fed in odd chunks (the first ones inside the provisional
  // step's 63 steps), against each lane fed alone into its own pool.
  std::mt19937_64 rng(5);
  std::normal_distribution<double> noise(0.0, 20.0);
  std::vector<double> t;
  for (int i = 0; i < 30000; ++i) t.push_back(i < 17000 ? i * 0.1 : 500.0 + i * 0.1);
  std::vector<std::vector<double>> lanes(8, std::vector<double>(t.size()));
  for (size_t g = 0; g < lanes.size(); ++g) {
    for (size_t i = 0; i < t.size(); ++i) {
      lanes[g][i] = 250.0 + 30.0 * std::sin(0.3 * t[i] + g) + noise(rng);
    }
  }
  SpectrumPool polled;
  FeedPolls(polled, t, lanes, 37);
  SpectrumPool alone;
  for (const auto& lane : lanes) {
    WelchAccumulator welch(&alone);
    welch.AddBatch(t.data(), lane.data(), t.size());
    welch.Finish();
  }
  EXPECT_EQ(polled.segments(), alone.segments());
  const auto a = polled.Result(0.1, 0.1, 20.0), b = alone.Result(0.1, 0.1, 20.0);
  EXPECT_NEAR(*a.band_fraction, *b.band_fraction, 1e-12);
  EXPECT_DOUBLE_EQ(*a.dominant_hz, *b.dominant_hz);
}

}  // namespace
}  // namespace headroom::analysis
