#include "twin/twin.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <thread>

#include "twin/keyed_random.h"
#include "twin_test_util.h"

namespace headroom::twin {
namespace {

Scenario Parse(const std::string& text) {
  auto s = ParseScenario(text, "test.toml");
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message());
  return std::move(s).value();
}

// A training-only job: 1 s idle-loaded startup after 0.5 s idle, 2 s steps of training
// (1000 tokens at 500 tok/s, 350 W), 1 s sync (120 W) after each step, a 3 s checkpoint
// (100 W) every 2 steps. No lag, no noise: power is exactly each phase's level.
Scenario TrainOnly() {
  std::string text = testing::TinyScenario();
  const size_t rollout = text.find("[rollout]");
  const size_t logprob = text.find("[logprob]");
  text.erase(rollout, logprob - rollout);
  text.replace(text.find("tokens_per_s = 500"), 18, "tokens_per_s = 500\ntokens_per_step = 1000");
  text.replace(text.find("tp = 1"), 6, "tp = 1\nidle_before_s = 0.5\nstartup_s = 1.0");
  text += "[checkpoint]\nevery_steps = 2\nduration_s = 3\npower_w = 100\n";
  return Parse(text);
}

TEST(Twin, FixedPhasesByHand) {
  Twin twin(TrainOnly(), 1);
  // 0-0.5 idle 50 | 0.5-1.5 loaded 80 | 1.5-3.5 train 350 | 3.5-4.5 sync 120 |
  // 4.5-6.5 train | 6.5-7.5 sync | 7.5-10.5 checkpoint 100.
  const struct {
    double t_s;
    double power_w;
    Phase phase;
  } expect[] = {
      {0.0, 50, Phase::kStartup},     {0.4, 50, Phase::kStartup},     {0.5, 80, Phase::kStartup},
      {1.4, 80, Phase::kStartup},     {1.5, 350, Phase::kTrain},      {3.4, 350, Phase::kTrain},
      {3.5, 120, Phase::kSync},       {4.5, 350, Phase::kTrain},      {6.5, 120, Phase::kSync},
      {7.5, 100, Phase::kCheckpoint}, {10.4, 100, Phase::kCheckpoint}};
  double energy_j = 0.0;
  size_t next = 0;
  for (int tick = 0; tick < 105; ++tick) {
    const double t_s = twin.t_s();
    twin.Tick();
    energy_j += twin.power_w()[0] * 0.1;
    if (next < std::size(expect) && std::abs(t_s - expect[next].t_s) < 1e-9) {
      EXPECT_NEAR(twin.power_w()[0], expect[next].power_w, 1e-9) << "t " << t_s;
      EXPECT_EQ(twin.phase(), expect[next].phase) << "t " << t_s;
      ++next;
    }
  }
  EXPECT_EQ(next, std::size(expect));
  EXPECT_EQ(twin.steps_done(), 2);
  // 0.5 x 50 + 1 x 80 + 2 x (2 x 350 + 1 x 120) + 3 x 100 over 10.5 s.
  EXPECT_NEAR(twin.energy_j(), 25 + 80 + 2 * (700 + 120) + 300, 1e-6);
  EXPECT_NEAR(energy_j, twin.energy_j(), 1e-6);  // trace energy = sum of tick power x tick
}

TEST(Twin, AHoldDelaysTheNextStepAtIdleLoadedPower) {
  Twin twin(TrainOnly(), 1);
  // As above, with a 2 s hold asked for during the first step's training: 4.5-6.5 held at 80 W
  // (idle, the model loaded), then train 6.5-8.5, sync 8.5-9.5, checkpoint 9.5-12.5.
  while (twin.t_s() < 2.0 - 1e-9) twin.Tick();
  EXPECT_DOUBLE_EQ(twin.HoldNextStep(2.0), 2.0);
  for (int tick = 20; tick < 125; ++tick) {
    const double t_s = twin.t_s();
    twin.Tick();
    if (std::abs(t_s - 4.5) < 1e-9 || std::abs(t_s - 6.4) < 1e-9) {
      EXPECT_EQ(twin.phase(), Phase::kIdle) << "t " << t_s;
      EXPECT_NEAR(twin.power_w()[0], 80, 1e-9);
    }
    if (std::abs(t_s - 6.5) < 1e-9) {
      EXPECT_EQ(twin.phase(), Phase::kTrain);
    }
    if (std::abs(t_s - 9.5) < 1e-9) {
      EXPECT_EQ(twin.phase(), Phase::kCheckpoint);
    }
  }
  EXPECT_EQ(twin.steps_done(), 2);
  EXPECT_NEAR(twin.held_s(), 2.0, 1e-9);
  EXPECT_DOUBLE_EQ(twin.pending_hold_s(), 0.0);
  // 25 + 80 + 2 x (700 + 120) + 2 x 80 held + 300.
  EXPECT_NEAR(twin.energy_j(), 25 + 80 + 2 * 820 + 160 + 300, 1e-6);
}

TEST(Twin, AGenerationOnlyJobGoesFromRolloutToSyncAndCountsProgress) {
  std::string text = testing::TinyScenario();
  text.erase(text.find("[train]"),
             std::string("[train]\ntokens_per_s = 500\npower_w = 350\n").size());
  Twin twin(Parse(text), 3);
  bool saw_logprob = false, saw_sync = false;
  double last_progress = 0.0;
  for (int tick = 0; tick < 3000 && twin.steps_done() < 3; ++tick) {
    twin.Tick();
    EXPECT_NE(twin.phase(), Phase::kTrain);
    saw_logprob = saw_logprob || twin.phase() == Phase::kLogprob;
    saw_sync = saw_sync || twin.phase() == Phase::kSync;
    const double p = twin.rollout_progress();
    EXPECT_GE(p, 0.0);
    EXPECT_LE(p, 1.0);
    if (twin.current_phase() == Phase::kRollout) {
      EXPECT_GE(p, last_progress - 1.0 * (p == 0.0));  // rises within a rollout
      last_progress = p;
    }
  }
  EXPECT_EQ(twin.steps_done(), 3);
  EXPECT_TRUE(saw_logprob);
  EXPECT_TRUE(saw_sync);
}

TEST(Twin, PowerLimitSlowsEveryPhaseAlongTheClockCurve) {
  // Curve: power fraction 1 -> time 1, 0.5 -> 2 (linear between). Training at 350 W:
  // a 175 W limit needs fraction 0.5 -> twice as long; 262.5 W needs 0.75 -> 1.5x.
  for (const auto& [limit_w, factor] : {std::pair{175.0, 2.0}, std::pair{262.5, 1.5}}) {
    Twin twin(TrainOnly(), 1);
    twin.SetPowerLimit(limit_w);
    while (twin.current_phase() != Phase::kTrain) twin.Tick();
    int train_ticks = 0;
    while (twin.current_phase() == Phase::kTrain) {
      twin.Tick();
      ++train_ticks;
      if (twin.phase() == Phase::kTrain) {
        EXPECT_NEAR(twin.power_w()[0], limit_w, 1e-9);
      }
    }
    EXPECT_EQ(train_ticks, static_cast<int>(std::lround(2.0 * factor / 0.1))) << limit_w;
  }
  Twin twin(TrainOnly(), 1);
  EXPECT_EQ(twin.SetPowerLimit(50.0), 100.0);  // clamped to min_w
  EXPECT_EQ(twin.SetPowerLimit(400.0), 0.0);   // at nameplate: no limit
}

TEST(Twin, LagFollowsTheTimeConstant) {
  std::string text = testing::TinyScenario();
  text.replace(text.find("tau_up_s = 0"), 12, "tau_up_s = 1");
  auto s = Parse(text);
  s.has_rollout = false;  // train-only from t = 0: 80 W -> 350 W
  s.train_tokens_per_step = 1e6;
  Twin twin(s, 1);
  const double alpha = 1.0 - std::exp(-0.1 / 1.0);
  double lagged = 80.0;  // starts at idle-loaded
  for (int k = 0; k < 30; ++k) {
    twin.Tick();
    lagged += (350.0 - lagged) * alpha;
    EXPECT_NEAR(twin.power_w()[0], lagged, 1e-9) << k;
  }
}

TEST(Twin, TelemetryIsTheOneSecondMovingAverage) {
  auto s = TrainOnly();  // no lag: power steps from 80 to 350 at t = 1.5 s
  Twin twin(s, 1);
  for (int k = 0; k < 15; ++k) twin.Tick();
  for (int k = 1; k <= 10; ++k) {
    twin.Tick();
    EXPECT_NEAR(twin.smoothed_w()[0], 80.0 + 270.0 * k / 10.0, 1e-9) << k;
  }
}

TEST(Twin, NoiseIsStationaryAr1) {
  auto s = TrainOnly();
  s.noise_w = 5.0;
  s.noise_rho = 0.9;
  s.train_tokens_per_step = 1e9;  // one endless step
  Twin twin(s, 7);
  while (twin.current_phase() != Phase::kTrain) twin.Tick();
  std::vector<double> e;
  for (int k = 0; k < 200000; ++k) {
    twin.Tick();
    e.push_back(twin.power_w()[0] - 350.0);
  }
  const double mean = std::accumulate(e.begin(), e.end(), 0.0) / e.size();
  double ss = 0.0, lag = 0.0;
  for (size_t i = 0; i < e.size(); ++i) {
    ss += (e[i] - mean) * (e[i] - mean);
    if (i > 0) lag += (e[i] - mean) * (e[i - 1] - mean);
  }
  EXPECT_NEAR(std::sqrt(ss / e.size()), 5.0, 0.25);
  EXPECT_NEAR(lag / ss, 0.9, 0.01);
}

TEST(Twin, OccupancyIsTheMinimumOfLimitSequencesAndKvCapacity) {
  // 2 prompts x 4 = 8 sequences.
  auto s = Parse(testing::TinyScenario());
  {
    Twin twin(s, 1);
    twin.SetConcurrency(3);
    twin.Tick();
    EXPECT_DOUBLE_EQ(twin.mean_occupancy(), 3.0);  // the limit binds
  }
  {
    Twin twin(s, 1);
    twin.Tick();
    EXPECT_DOUBLE_EQ(twin.mean_occupancy(), 8.0);  // all sequences fit under 8
  }
  {
    // KV for 2 sequences: (GiB x 0.9 - 2e9) / 4096 / 1100 = 2.x
    auto small = s;
    small.memory_gib = (2.5 * 4096 * 1100 + 2e9) / 0.9 / 1073741824.0;
    Twin twin(small, 1);
    twin.Tick();
    EXPECT_DOUBLE_EQ(twin.mean_occupancy(), 2.0);
  }
}

TEST(Twin, EveryRolloutEndsInAStragglerTail) {
  auto s = Parse(testing::TinyScenario());
  s.prompts_per_step = 8;  // 32 sequences, 8 at a time
  Twin twin(s, 3);
  std::vector<double> occupancy;  // the first step's rollout, tick by tick
  while (twin.current_phase() != Phase::kRollout) twin.Tick();
  while (twin.current_phase() == Phase::kRollout) {
    twin.Tick();
    occupancy.push_back(twin.mean_occupancy());
  }
  ASSERT_GT(occupancy.size(), 10u);
  EXPECT_DOUBLE_EQ(occupancy.front(), 8.0);
  EXPECT_DOUBLE_EQ(*std::max_element(occupancy.begin(), occupancy.end()), 8.0);
  // The last sequences finish one by one: occupancy falls below the limit before the end.
  EXPECT_LT(occupancy.back(), 8.0);
  EXPECT_TRUE(std::is_sorted(occupancy.end() - 3, occupancy.end(), std::greater<>()));
}

TEST(Twin, TokensEqualTheDrawnCompletionLengths) {
  auto s = Parse(testing::TinyScenario());
  s.length_sigma = 2.0;    // a heavy tail ...
  s.max_new_tokens = 300;  // ... capped
  s.prompts_per_step = 50;
  Twin twin(s, 5);
  // When a rollout ends, every token drawn so far has been generated.
  int rollouts = 0;
  while (rollouts < 3) {
    const Phase before = twin.current_phase();
    twin.Tick();
    if (before == Phase::kRollout && twin.current_phase() != Phase::kRollout) {
      ++rollouts;
      EXPECT_NEAR(twin.tokens_total(), twin.drawn_tokens_total(), 1e-9 * twin.drawn_tokens_total());
    }
  }
  // Three steps of 200 sequences, each 1..300 tokens.
  EXPECT_LE(twin.drawn_tokens_total(), 3 * 200 * 300.0);
  EXPECT_GE(twin.drawn_tokens_total(), 3 * 200 * 1.0);
}

TEST(Twin, GroupSizeWaitsForTheNextStepConcurrencyActsNow) {
  auto s = Parse(testing::TinyScenario());
  Twin twin(s, 1);
  twin.Tick();
  EXPECT_EQ(twin.SetGroupSize(2), 2);
  EXPECT_EQ(twin.group_size(), 4);       // this step keeps its group
  EXPECT_EQ(twin.SetGroupSize(99), 16);  // clamped to the range
  EXPECT_EQ(twin.SetGroupSize(2), 2);
  while (twin.steps_done() == 0) twin.Tick();
  twin.Tick();
  EXPECT_EQ(twin.group_size(), 2);
  EXPECT_EQ(twin.SetConcurrency(0), 1);
  EXPECT_EQ(twin.SetConcurrency(1000), 64);
}

TEST(Twin, TensorParallelGpusShareOneEngine) {
  std::string text = testing::TinyScenario();
  text.replace(text.find("gpus = 1"), 8, "gpus = 4");
  text.replace(text.find("tp = 1"), 6, "tp = 2");
  auto s = Parse(text);
  s.noise_w = 0.0;
  Twin twin(s, 11);
  bool differ = false;
  double tokens_odd = 0.0;
  while (twin.steps_done() == 0) {
    twin.Tick();
    const auto& p = twin.power_w();
    EXPECT_DOUBLE_EQ(p[0], p[1]);  // one engine: GPUs 0 and 1
    EXPECT_DOUBLE_EQ(p[2], p[3]);  // the other: GPUs 2 and 3
    differ = differ || p[0] != p[2];
    tokens_odd += twin.tick_tokens()[1] + twin.tick_tokens()[3];
  }
  EXPECT_TRUE(differ);         // the engines drew different completions
  EXPECT_EQ(tokens_odd, 0.0);  // an engine's tokens are counted on its first GPU
}

TEST(Twin, StopsAtStopTime) {
  auto s = TrainOnly();
  s.stop_at_s = 5.0;
  Twin twin(s, 1);
  for (int k = 0; k < 60; ++k) twin.Tick();
  EXPECT_EQ(twin.current_phase(), Phase::kStopped);
  EXPECT_DOUBLE_EQ(twin.power_w()[0], 50.0);  // idle_w
}

// TrainOnly with slow storage: checkpoints beginning at or after the drawn onset take 6 s.
Scenario SlowStorage(double onset_mean_s) {
  Scenario s = TrainOnly();
  s.checkpoint_slow_onset_mean_s = onset_mean_s;
  s.checkpoint_slow_s = 6.0;
  return s;
}

// (start, duration) of every checkpoint the twin ran in `ticks` ticks, from the phase of each
// tick (every phase boundary of TrainOnly falls on a tick boundary).
std::vector<std::pair<double, double>> Checkpoints(Twin& twin, int ticks) {
  std::vector<std::pair<double, double>> out;
  bool in = false;
  for (int k = 0; k < ticks; ++k) {
    const double t_s = twin.t_s();
    twin.Tick();
    const bool now = twin.phase() == Phase::kCheckpoint;
    if (now && !in) out.push_back({t_s, 0.0});
    if (now) out.back().second += 0.1;
    in = now;
  }
  if (in) out.pop_back();  // still running: its duration is unknown
  return out;
}

TEST(Twin, CheckpointsTurnSlowFromTheDrawnOnsetOn) {
  // Steps of 3 s (2 s train + 1 s sync) from 1.5 s; a checkpoint after every second step:
  // fast ones at 7.5, 16.5, 25.5, ... (3 s), and once storage is slow, 6 s each.
  int saw_both = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    Twin twin(SlowStorage(20.0), seed);
    const double onset_s = twin.slow_storage_from_s();
    ASSERT_GE(onset_s, 1.5);  // counted from the first step
    const auto checkpoints = Checkpoints(twin, 1200);
    ASSERT_GE(checkpoints.size(), 8u);
    double expect_start_s = 7.5;
    bool fast = false, slow = false;
    for (const auto& [start_s, duration_s] : checkpoints) {
      EXPECT_NEAR(start_s, expect_start_s, 1e-6) << "seed " << seed;
      const double expect_s = start_s >= onset_s ? 6.0 : 3.0;
      EXPECT_NEAR(duration_s, expect_s, 1e-6) << "seed " << seed << " at " << start_s;
      (expect_s == 6.0 ? slow : fast) = true;
      expect_start_s = start_s + duration_s + 6.0;  // then two 3 s steps
    }
    saw_both += fast && slow;
  }
  EXPECT_GE(saw_both, 10);  // most onsets (mean 20 s) fall inside the 120 s run
}

TEST(Twin, SlowStorageOnsetIsExponentialFromTheFirstStep) {
  // Over 4000 seeds: the mean of onset - 1.5 s is the scenario's 50 s within 4 standard errors
  // (50 / sqrt(4000) = 0.79 s), and P(onset - 1.5 <= 50 ln 2) = 1/2 within 4 x 0.0079.
  const Scenario s = SlowStorage(50.0);
  const int n = 4000;
  double sum_s = 0.0;
  int below_median = 0;
  for (int seed = 0; seed < n; ++seed) {
    const double after_s = Twin(s, static_cast<uint64_t>(seed)).slow_storage_from_s() - 1.5;
    ASSERT_GT(after_s, 0.0);
    sum_s += after_s;
    below_median += after_s <= 50.0 * std::log(2.0);
  }
  EXPECT_NEAR(sum_s / n, 50.0, 4 * 50.0 / std::sqrt(n));
  EXPECT_NEAR(static_cast<double>(below_median) / n, 0.5, 4 * 0.5 / std::sqrt(n));
  EXPECT_TRUE(std::isinf(Twin(TrainOnly(), 1).slow_storage_from_s()));  // not configured
}

TEST(Twin, SlowStorageLeavesTheOtherDrawsOfASeedAlone) {
  // Noise and every other draw are the same with and without slow storage: the two runs agree
  // until the first slow checkpoint outlasts a fast one (3 s after it begins), then part.
  auto noisy = [](Scenario s) {
    s.noise_w = 5.0;
    s.noise_rho = 0.9;
    return s;
  };
  for (uint64_t seed : {3u, 4u, 5u}) {
    Twin plain(noisy(TrainOnly()), seed);
    Twin slow(noisy(SlowStorage(20.0)), seed);
    const double onset_s = slow.slow_storage_from_s();
    // Checkpoints begin at 7.5 + 9 k s while storage is fast: the first slow one is the first
    // at or after the onset.
    const double first_slow_s = 7.5 + 9.0 * std::ceil((onset_s - 7.5) / 9.0);
    int ticks_equal = 0;
    bool parted = false;
    while (plain.t_s() < first_slow_s + 5.0) {
      const double t_s = plain.t_s();
      plain.Tick();
      slow.Tick();
      if (t_s < first_slow_s + 3.0 - 1e-9) {
        // (Equal to rounding: the fast checkpoint's last tick may end 1e-15 s early.)
        ASSERT_NEAR(plain.power_w()[0], slow.power_w()[0], 1e-9) << "seed " << seed << " t " << t_s;
        ++ticks_equal;
      } else {
        parted = parted || std::abs(plain.power_w()[0] - slow.power_w()[0]) > 1.0;
      }
    }
    EXPECT_GT(ticks_equal, 100) << "seed " << seed;
    EXPECT_TRUE(parted) << "seed " << seed;
  }
}

// Common random numbers (issue 39): two controllers on one seed face the same completions.
// Concurrency 2 and 64 take different numbers of ticks (and noise draws) per rollout; the
// lengths drawn for each step are still the same, step by step.
TEST(Twin, CommonRandomNumbersGiveEveryControllerOnASeedTheSameCompletions) {
  auto s = Parse(testing::TinyScenario());
  s.noise_w = 5.0;
  s.noise_rho = 0.9;
  s.prompts_per_step = 8;
  const auto drawn_per_step = [&s](int concurrency, int group_size, double limit_w) {
    Twin twin(s, 11);
    twin.SetConcurrency(concurrency);
    twin.SetGroupSize(group_size);
    twin.SetPowerLimit(limit_w);
    std::vector<double> drawn;  // completion tokens drawn by each step's rollout
    double before = 0.0;
    int step = -1;
    while (twin.steps_done() < 5) {
      twin.Tick();
      if (twin.steps_done() != step && twin.drawn_tokens_total() > before) {
        drawn.push_back(twin.drawn_tokens_total() - before);
        before = twin.drawn_tokens_total();
        step = twin.steps_done();
      }
    }
    return drawn;
  };
  const auto fast = drawn_per_step(64, 4, 0.0);
  const auto slow = drawn_per_step(2, 4, 250.0);
  ASSERT_GE(fast.size(), 5u);
  ASSERT_EQ(std::vector<double>(fast.begin(), fast.begin() + 5),
            std::vector<double>(slow.begin(), slow.begin() + 5));
  // A larger group takes the same first completions of each prompt, and more: at least as many
  // tokens each step (from the second: the first step's group was fixed at construction).
  const auto larger = drawn_per_step(64, 8, 0.0);
  for (size_t k = 1; k < 5; ++k) EXPECT_GT(larger[k], fast[k]) << "step " << k;
  // Another seed draws other lengths.
  Twin other(s, 12);
  while (other.drawn_tokens_total() == 0.0) other.Tick();
  EXPECT_NE(other.drawn_tokens_total(), fast[0]);
}

// The telemetry noise is keyed by (seed, tick, GPU) -- ticks 2k and 2k + 1 the two normals of key
// (k, GPU) -- whatever else the twin drew or did: with
// no lag, true power is the noise-free run's plus an AR(1) whose innovations are computed here
// from the keys alone (stationary start from its own stream).
TEST(Twin, NoiseIsKeyedByTheSeedTheTickAndTheGpu) {
  Scenario quiet = TrainOnly();  // no lag
  Scenario noisy = quiet;
  noisy.noise_w = 5.0;
  noisy.noise_rho = 0.9;
  const double innovation_w = 5.0 * std::sqrt(1.0 - 0.9 * 0.9);
  Twin a(quiet, 21);
  Twin b(noisy, 21);
  double noise_w = 5.0 * KeyedNormal(21, kStartNoiseStream, 0, 0);
  for (uint64_t k = 0; k < 400; ++k) {
    a.Tick();
    b.Tick();
    const NormalPair pair = KeyedNormalPair(21, kNoiseStream, k / 2, 0);
    noise_w = 0.9 * noise_w + innovation_w * (k % 2 == 0 ? pair.first : pair.second);
    ASSERT_NEAR(b.power_w()[0], a.power_w()[0] + noise_w, 1e-9) << "tick " << k;
  }
}

// The keyed normal: mean 0, variance 1, and tails of a normal, over 200,000 keys.
TEST(KeyedRandom, KeyedNormalIsAStandardNormal) {
  const int n = 200000;
  double sum = 0.0;
  double sum2 = 0.0;
  int beyond2 = 0;
  for (int k = 0; k < n; ++k) {
    const double z = KeyedNormal(7, kNoiseStream, static_cast<uint64_t>(k), 3);
    sum += z;
    sum2 += z * z;
    beyond2 += std::abs(z) > 2.0;
  }
  const double mean = sum / n;
  EXPECT_NEAR(mean, 0.0, 4.0 / std::sqrt(n));  // 4 standard errors
  // The pair's two are uncorrelated: |r| within 4 standard errors of 0.
  double cross = 0.0;
  for (int k = 0; k < n; ++k) {
    const NormalPair pair = KeyedNormalPair(7, kLengthStream, static_cast<uint64_t>(k), 0);
    cross += pair.first * pair.second;
  }
  EXPECT_NEAR(cross / n, 0.0, 4.0 / std::sqrt(n));
  EXPECT_NEAR(sum2 / n - mean * mean, 1.0, 0.02);
  EXPECT_NEAR(static_cast<double>(beyond2) / n, 0.0455, 0.003);  // P(|Z| > 2) = 4.55 %
  // Pure: the same key, the same number; each word of the key matters.
  EXPECT_EQ(KeyedNormal(1, 2, 3, 4), KeyedNormal(1, 2, 3, 4));
  EXPECT_NE(KeyedNormal(1, 2, 3, 4), KeyedNormal(2, 2, 3, 4));
  EXPECT_NE(KeyedNormal(1, 2, 3, 4), KeyedNormal(1, 3, 3, 4));
  EXPECT_NE(KeyedNormal(1, 2, 3, 4), KeyedNormal(1, 2, 4, 4));
  EXPECT_NE(KeyedNormal(1, 2, 3, 4), KeyedNormal(1, 2, 3, 5));
  EXPECT_GT(UnitUniform(0), 0.0);
  EXPECT_LT(UnitUniform(~uint64_t{0}), 1.0);
}

std::vector<double> PowerRun(const Scenario& s, uint64_t seed, int ticks) {
  Twin twin(s, seed);
  std::vector<double> out;
  for (int k = 0; k < ticks; ++k) {
    twin.Tick();
    out.insert(out.end(), twin.power_w().begin(), twin.power_w().end());
  }
  return out;
}

TEST(Twin, FollowingATrainerItsPhasesAndStepsAreTheTrainersAndItsPowerTheirs) {
  // Tiny: no lag, no noise, so each tick's power is its phase's level exactly.
  Twin twin(Parse(testing::TinyScenario()), 1);
  EXPECT_FALSE(twin.following());
  const auto hold = [&](Phase phase, int step, int ticks, double power_w) {
    twin.Follow(phase, step);
    for (int k = 0; k < ticks; ++k) {
      twin.Tick();
      ASSERT_NEAR(twin.power_w()[0], power_w, 1e-9) << PhaseName(phase) << " tick " << k;
      ASSERT_EQ(twin.phase(), phase);
      ASSERT_EQ(twin.steps_done(), step);  // its own step machine never advances
    }
  };
  // Each phase for longer than its own work would take (a 2 s step's training, a 1 s sync).
  hold(Phase::kTrain, 3, 50, 350.0);
  hold(Phase::kSync, 3, 30, 120.0);
  hold(Phase::kLogprob, 3, 30, 300.0);
  hold(Phase::kIdle, 3, 10, 80.0);     // held: idle with the model loaded
  hold(Phase::kStartup, 0, 10, 80.0);  // loading
  hold(Phase::kStopped, 9, 10, 50.0);  // the job has ended: idle
  EXPECT_TRUE(twin.following());
  // A power limit lowers a working phase along the clock curve, as in the step machine.
  const Scenario tiny = Parse(testing::TinyScenario());
  twin.SetPowerLimit(200.0);
  hold(Phase::kTrain, 4, 10, tiny.clock.Apply(350.0, 200.0).power_w);
  twin.SetPowerLimit(0.0);
}

TEST(Twin, FollowingATrainerRolloutDecodesAtTheDecidedConcurrencyForAsLongAsItLasts) {
  const Scenario tiny = Parse(testing::TinyScenario());
  // Mean power of 60 s of rollout at a concurrency: 8 sequences a batch, so 8 is the most
  // that run at once. Decode power 100 + 100 / (1 + e^-(log2 n - 3)): 104.7 W at 1, 150 W at 8.
  const auto rollout = [&](int concurrency, double* tokens) {
    Twin twin(tiny, 7);
    twin.SetConcurrency(concurrency);
    twin.Follow(Phase::kRollout, 1);
    double energy = 0.0;
    for (int k = 0; k < 600; ++k) {
      twin.Tick();
      energy += twin.power_w()[0] * tiny.tick_s;
      EXPECT_EQ(twin.phase(), Phase::kRollout);
    }
    *tokens = twin.tokens_total();
    return energy / 60.0;
  };
  double tokens_1 = 0.0, tokens_8 = 0.0;
  const double at_1 = rollout(1, &tokens_1);
  const double at_8 = rollout(8, &tokens_8);
  EXPECT_GT(at_8, at_1 + 20.0);
  // Batches start again while the trainer still generates: 60 s at 10 tok/s per sequence is
  // about 600 tokens a sequence at once, several 8 x ~100-token batches at concurrency 8.
  EXPECT_GT(tokens_8, 3.0 * 8 * 100);
  EXPECT_GT(tokens_8, 2.0 * tokens_1);
}

TEST(Twin, FollowingATrainersInFlightItsRolloutDrawsThatOccupancyNotItsOwn) {
  const Scenario tiny = Parse(testing::TinyScenario());  // no lag, no noise, one GPU
  Twin twin(tiny, 7);
  twin.SetConcurrency(1);  // the decision says 1; the trainer reports 6 in flight
  twin.Follow(Phase::kRollout, 1);
  twin.FollowInFlight(6.0);
  const double before = twin.tokens_total();
  for (int k = 0; k < 100; ++k) {
    twin.Tick();
    ASSERT_NEAR(twin.power_w()[0], tiny.decode.PowerW(6.0), 1e-9) << k;
  }
  // 10 s of decode at 6 sequences: the curve's throughput, no prefill, no batch ends.
  EXPECT_NEAR(twin.tokens_total() - before, tiny.decode.TokensPerS(6.0) * 100 * tiny.tick_s, 1e-6);
  EXPECT_GT(tiny.decode.PowerW(6.0), tiny.decode.PowerW(1.0) + 10.0);
  // Nothing in flight: idle with the model loaded.
  twin.FollowInFlight(0.0);
  twin.Tick();
  EXPECT_NEAR(twin.power_w()[0], tiny.decode.idle_loaded_w, 1e-9);
  // No report of it: the twin's own rollout at the decided concurrency again.
  twin.FollowInFlight(std::nullopt);
  for (int k = 0; k < 20; ++k) twin.Tick();
  EXPECT_LT(twin.power_w()[0], tiny.decode.PowerW(6.0));
}

TEST(Twin, FollowingATrainerTheGroupSizeChangesAtItsNextStep) {
  Twin twin(Parse(testing::TinyScenario()), 1);
  twin.Follow(Phase::kRollout, 4);
  EXPECT_EQ(twin.group_size(), 4);
  twin.SetGroupSize(16);
  twin.Tick();
  twin.Follow(Phase::kRollout, 4);  // the same step's rollout, reported again
  EXPECT_EQ(twin.group_size(), 4);
  twin.Follow(Phase::kTrain, 4);
  EXPECT_EQ(twin.group_size(), 4);
  twin.Follow(Phase::kRollout, 5);  // the next step's
  EXPECT_EQ(twin.group_size(), 16);
}

TEST(Twin, DeterministicForASeedAlsoAcrossThreads) {
  auto s = LoadScenario("a100-14b-tp2");
  ASSERT_TRUE(s.ok());
  const auto a = PowerRun(*s, 42, 3000);
  EXPECT_EQ(a, PowerRun(*s, 42, 3000));
  EXPECT_NE(a, PowerRun(*s, 43, 3000));
  std::vector<std::vector<double>> parallel(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] { parallel[i] = PowerRun(*s, 40 + i, 3000); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(parallel[i], PowerRun(*s, 40 + i, 3000)) << i;
}

}  // namespace
}  // namespace headroom::twin
