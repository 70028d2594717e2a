// A scenario calibrated from a job's trace recovers what the trace can show. The "real job" is
// the twin on a known scenario, sampled as the agent samples it (the telemetry view every
// 0.5 s, the phase, the step, the tokens since the previous sample, the concurrency in force,
// moved at random as a controller would); the base is the same job with every measurable
// value wrong by 15-40 %; the calibration must land on the truth, not on the base.
#include "twin/calibrate_trace.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>

#include "twin/twin.h"

namespace headroom::twin {
namespace {

std::vector<JobSample> SampleJob(const Scenario& truth, double duration_s, uint64_t seed) {
  Twin twin(truth, seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> log_c(std::log2(truth.concurrency_range.lo),
                                               std::log2(truth.concurrency_range.hi));
  std::vector<JobSample> out;
  const int ticks_per_sample = static_cast<int>(std::lround(0.5 / truth.tick_s));
  double tokens_before = 0.0;
  while (twin.t_s() < duration_s) {
    for (int k = 0; k < ticks_per_sample; ++k) twin.Tick();
    JobSample x;
    x.t_s = twin.t_s();
    for (double w : twin.smoothed_w()) x.power_w += w / static_cast<double>(truth.gpus);
    x.phase = twin.phase();
    x.step = twin.steps_done();
    x.tokens = twin.tokens_total() - tokens_before;
    tokens_before = twin.tokens_total();
    // The decision of this sample, in force until the next one.
    x.concurrency = twin.SetConcurrency(static_cast<int>(std::lround(std::exp2(log_c(rng)))));
    x.group_size = twin.group_size();
    x.budget_w = truth.budget_w;
    out.push_back(x);
  }
  return out;
}

Scenario Wrong(const Scenario& t) {
  Scenario b = t;
  b.logprob_tokens_per_s *= 1.3;
  b.logprob_power_w *= 0.8;
  b.train_tokens_per_s *= 0.7;
  b.train_power_w *= 1.15;
  b.sync_s *= 1.4;
  b.sync_power_w *= 1.3;
  b.length_median_tokens *= 0.7;
  b.decode.tokens_per_s.l *= 1.25;
  b.decode.tokens_per_s.b0 *= 1.25;
  b.decode.power_w.b0 *= 0.85;
  b.decode.power_w.l *= 1.2;
  return b;
}

TEST(CalibrateFromTrace, RecoversWhatTheTraceShowsFromAWrongBase) {
  auto truth = LoadScenario("h100-8b-tp1");
  ASSERT_TRUE(truth.ok());
  const std::vector<JobSample> samples = SampleJob(*truth, 1800.0, 3);
  auto c = CalibrateFromTrace(samples, Wrong(*truth), "mine");
  ASSERT_TRUE(c.ok()) << c.error().message();
  const Scenario& s = c->scenario;
  EXPECT_EQ(s.name, "mine");
  EXPECT_GE(c->steps, 40);
  const auto near = [](double got, double want, double rel) {
    return std::abs(got / want - 1.0) <= rel;
  };
  EXPECT_PRED3(near, s.logprob_tokens_per_s, truth->logprob_tokens_per_s, 0.03);
  EXPECT_PRED3(near, s.train_tokens_per_s, truth->train_tokens_per_s, 0.03);
  EXPECT_PRED3(near, s.logprob_power_w, truth->logprob_power_w, 0.02);
  EXPECT_PRED3(near, s.train_power_w, truth->train_power_w, 0.02);
  EXPECT_PRED3(near, s.sync_s, truth->sync_s, 0.05);
  EXPECT_PRED3(near, s.sync_power_w, truth->sync_power_w, 0.05);
  EXPECT_PRED3(near, s.length_median_tokens, truth->length_median_tokens, 0.03);
  for (double n : {16.0, 64.0, 128.0}) {
    SCOPED_TRACE(n);
    EXPECT_PRED3(near, s.decode.TokensPerS(n), truth->decode.TokensPerS(n), 0.03);
    EXPECT_PRED3(near, s.decode.PowerW(n), truth->decode.PowerW(n), 0.03);
  }
  // What the trace cannot show is the base's.
  EXPECT_EQ(s.prompts_per_step, truth->prompts_per_step);
  EXPECT_EQ(s.decode.power_w.x0, truth->decode.power_w.x0);
  EXPECT_EQ(s.tau_up_s, truth->tau_up_s);
  // The result is a scenario the parser takes.
  EXPECT_TRUE(ParseScenario(ScenarioToToml(s), "calibrated").ok());
}

TEST(CalibrateFromTrace, TooShortOrNoRolloutIsRefused) {
  auto truth = LoadScenario("h100-8b-tp1");
  ASSERT_TRUE(truth.ok());
  auto short_trace = CalibrateFromTrace(SampleJob(*truth, 60.0, 1), *truth, "x");
  ASSERT_FALSE(short_trace.ok());
  EXPECT_NE(short_trace.error().message().find("complete training steps"), std::string::npos)
      << short_trace.error().message();
  auto training_only = LoadScenario("h100-8b-ddp-train");
  ASSERT_TRUE(training_only.ok());
  auto no_rollout = CalibrateFromTrace(SampleJob(*truth, 60.0, 1), *training_only, "x");
  ASSERT_FALSE(no_rollout.ok());
  EXPECT_NE(no_rollout.error().message().find("has no rollout"), std::string::npos);
}

// Whatever the samples say — phases in any order, steps that jump back, zero or huge tokens,
// concurrency 0 — the calibration answers with a scenario the parser takes or an error; it never
// reads outside the samples (ASan) or divides by zero into the file.
TEST(CalibrateFromTrace, ArbitrarySamplesGiveAValidScenarioOrAnError) {
  auto base = LoadScenario("h100-8b-tp1");
  ASSERT_TRUE(base.ok());
  std::mt19937_64 rng(42);
  const std::array<Phase, 6> phases = {Phase::kRollout, Phase::kLogprob,    Phase::kTrain,
                                       Phase::kSync,    Phase::kCheckpoint, Phase::kIdle};
  int ok = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<JobSample> samples;
    const int n = 8 + static_cast<int>(rng() % 400);
    int step = 0;
    for (int i = 0; i < n; ++i) {
      JobSample x;
      x.t_s = 0.5 * i;
      x.power_w = static_cast<double>(rng() % 800);
      x.phase = phases[rng() % (trial % 3 == 0 ? 6 : 4)];
      if (rng() % 7 == 0) step += static_cast<int>(rng() % 3) - (trial % 5 == 0 ? 1 : 0);
      x.step = step;
      x.tokens = (rng() % 4 == 0) ? 0.0 : static_cast<double>(rng() % 5000);
      x.concurrency = static_cast<double>(rng() % 600);
      x.group_size = static_cast<double>(rng() % 20);
      x.budget_w = static_cast<double>(rng() % 900);
      samples.push_back(x);
    }
    auto c = CalibrateFromTrace(samples, *base, "fuzzed");
    if (!c.ok()) continue;
    ++ok;
    const std::string toml = ScenarioToToml(c->scenario);
    // Either it parses, or the CLI refuses it with the parser's reason; never a crash.
    (void)ParseScenario(toml, "fuzzed");
  }
  EXPECT_GT(ok, 0);  // some of them are calibrations
}

TEST(CalibrateFromTrace, CappedLognormalMeanByHand) {
  // No cap in reach: the lognormal mean, median x exp(sigma^2 / 2).
  EXPECT_NEAR(CappedLognormalMean(300.0, 0.8, 1e12), 300.0 * std::exp(0.32), 1e-6);
  // sigma 0: the median, capped.
  EXPECT_DOUBLE_EQ(CappedLognormalMean(300.0, 0.0, 200.0), 200.0);
  // The inverse.
  const double mean = CappedLognormalMean(300.0, 0.8, 1024.0);
  EXPECT_NEAR(MedianForCappedMean(mean, 0.8, 1024.0), 300.0, 1e-6);
  EXPECT_DOUBLE_EQ(MedianForCappedMean(2000.0, 0.8, 1024.0), 1024.0);
}

}  // namespace
}  // namespace headroom::twin
