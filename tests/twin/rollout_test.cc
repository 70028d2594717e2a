// The rollout engine's admission, continuous and chunked, against staircases worked by hand;
// and what chunked admission costs a whole twin at one seed.
#include "twin/rollout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <vector>

#include "twin/scenario.h"
#include "twin/twin.h"

namespace headroom::twin {
namespace {

constexpr double kTickS = 0.5;
constexpr int kRoomyKvCapacity = 1000;  // never binds here
constexpr double kDecodeW = 200.0;

// Decode curves a hand can follow. Below n_min = 8 decode is memory-bound; with a throughput
// logistic flat in n (l = 0) the step time is flat (DecodeCurves::Below), so every sequence in
// flight advances at b0 / n_min = 2 tokens/s whatever n is: one token per 0.5 s tick. Power is
// flat at 200 W. No prefill (no prompt tokens).
DecodeCurves HandCurves() {
  DecodeCurves c;
  c.power_w = {kDecodeW, 0.0, 0.0, 1.0};
  c.tokens_per_s = {16.0, 0.0, 0.0, 1.0};
  c.n_min = 8.0;
  c.idle_loaded_w = 80.0;
  return c;
}

struct EngineRun {
  std::vector<double> occupancy;  // per tick
  double tokens = 0.0;
  double duration_s = 0.0;  // ticks until done x the tick
  bool admitted_while_busy = false;
};

// Runs a rollout of `lengths` to its end; `concurrency(tick)` is the limit given at each tick.
EngineRun RunEngine(Admission admission, std::vector<double> lengths,
                    const std::function<int(int)>& concurrency,
                    int kv_capacity = kRoomyKvCapacity) {
  const DecodeCurves curves = HandCurves();
  const EngineRates rates{&curves, 1000.0, 300.0, 0.0, nullptr};
  RolloutEngine engine(admission);
  engine.Start(std::move(lengths), 0.0);
  EngineRun run;
  for (int tick = 0; !engine.done() && tick < 10000; ++tick) {
    const size_t busy = engine.in_flight();
    const size_t admitted_before = engine.finished() + engine.in_flight();
    const auto t = engine.Advance(kTickS, concurrency(tick), kv_capacity, rates);
    const size_t admitted = engine.finished() + engine.in_flight() - admitted_before;
    if (admitted > 0 && busy > 0) run.admitted_while_busy = true;
    run.occupancy.push_back(t.occupancy);
    run.tokens += t.tokens;
    EXPECT_DOUBLE_EQ(t.power_w, t.occupancy > 0.0 ? kDecodeW : curves.idle_loaded_w);
  }
  run.duration_s = static_cast<double>(run.occupancy.size()) * kTickS;
  return run;
}

std::function<int(int)> Constant(int c) {
  return [c](int) { return c; };
}

TEST(RolloutEngine, TheHandCurvesAdvanceEverySequenceOneTokenPerTick) {
  const DecodeCurves c = HandCurves();
  for (const double n : {1.0, 2.0, 4.0}) EXPECT_DOUBLE_EQ(c.TokensPerS(n) * kTickS / n, 1.0);
  EXPECT_DOUBLE_EQ(c.PowerW(1.0), kDecodeW);
  EXPECT_DOUBLE_EQ(c.PowerW(4.0), kDecodeW);
}

// Lengths {10, 1, 1, 1} at concurrency 2, one token per sequence per tick.
// Continuous: t 0: 10 and 1 in; the 1 ends in tick 0, the next 1 comes in at tick 1 and ends
// there, the last at tick 2; then the 10 alone to the end of tick 9: 10 ticks, 5.0 s.
// Chunked: 10 and 1 in; the 1 ends in tick 0 and the chunk waits for the 10 (occupancy 1, ticks
// 1-9); the second chunk (1, 1) runs in tick 10: 11 ticks, 5.5 s.
TEST(RolloutEngine, AChunkWaitsForItsLongestSequence) {
  const std::vector<double> lengths{10, 1, 1, 1};
  const EngineRun chunked = RunEngine(Admission::kChunked, lengths, Constant(2));
  EXPECT_EQ(chunked.occupancy, (std::vector<double>{2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2}));
  EXPECT_DOUBLE_EQ(chunked.duration_s, 5.5);
  EXPECT_DOUBLE_EQ(chunked.tokens, 13.0);

  const EngineRun continuous = RunEngine(Admission::kContinuous, lengths, Constant(2));
  EXPECT_EQ(continuous.occupancy, (std::vector<double>{2, 2, 2, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_DOUBLE_EQ(continuous.duration_s, 5.0);
  EXPECT_DOUBLE_EQ(continuous.tokens, 13.0);
}

// Lengths {1, 1, 1, 10} at concurrency 2: the first chunk (1, 1) ends in tick 0, the second
// (1, 10) runs two in tick 1 and the 10 alone in ticks 2-10: 11 ticks, 5.5 s. Continuous
// admission takes the same path here (both of the first pair end in the same tick).
TEST(RolloutEngine, ChunksInOrderOfSubmission) {
  const std::vector<double> lengths{1, 1, 1, 10};
  const std::vector<double> staircase{2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  for (const Admission a : {Admission::kChunked, Admission::kContinuous}) {
    SCOPED_TRACE(AdmissionName(a));
    const EngineRun run = RunEngine(a, lengths, Constant(2));
    EXPECT_EQ(run.occupancy, staircase);
    EXPECT_DOUBLE_EQ(run.duration_s, 5.5);
    EXPECT_DOUBLE_EQ(run.tokens, 13.0);
  }
}

// 40 sequences of 1-13 tokens under a limit that moves every tick and a KV capacity of 3:
// chunked admission admits only into an empty engine, a chunk of min(limit, KV, left).
TEST(RolloutEngine, ChunkedNeverAdmitsWhileAnythingIsInFlight) {
  std::vector<double> lengths;
  for (int i = 0; i < 40; ++i) lengths.push_back(1 + (i * 7) % 13);
  const auto limit = [](int tick) { return 1 + tick % 5; };
  constexpr int kKv = 3;
  const EngineRun chunked = RunEngine(Admission::kChunked, lengths, limit, kKv);
  EXPECT_FALSE(chunked.admitted_while_busy);
  EXPECT_DOUBLE_EQ(chunked.tokens, std::accumulate(lengths.begin(), lengths.end(), 0.0));
  // Every chunk starts at min(limit, KV, left) and only falls until the next one.
  for (size_t t = 0; t < chunked.occupancy.size(); ++t) {
    ASSERT_GE(chunked.occupancy[t], 1.0);
    ASSERT_LE(chunked.occupancy[t], kKv);
  }
  // Continuous admission refills while busy (the contrast that makes the check mean something).
  EXPECT_TRUE(RunEngine(Admission::kContinuous, lengths, limit, kKv).admitted_while_busy);
}

// Six sequences of 3 tokens. The limit rises from 2 to 4 after tick 0: the chunk begun at 2 keeps
// 2 for its 3 ticks, the next takes 4 (ticks 3-5). Falling from 4 to 1 after tick 0: the chunk
// of 4 runs its 3 ticks, then chunks of 1 (ticks 3-5, 6-8).
TEST(RolloutEngine, AConcurrencyChangeMidChunkAppliesAtTheNextChunk) {
  const std::vector<double> lengths(6, 3.0);
  const auto rise = [](int tick) { return tick == 0 ? 2 : 4; };
  EXPECT_EQ(RunEngine(Admission::kChunked, lengths, rise).occupancy,
            (std::vector<double>{2, 2, 2, 4, 4, 4}));
  // Continuous admission takes the rise at once: 2 more in at tick 1.
  EXPECT_EQ(RunEngine(Admission::kContinuous, lengths, rise).occupancy,
            (std::vector<double>{2, 4, 4, 4, 2, 2}));
  const auto fall = [](int tick) { return tick == 0 ? 4 : 1; };
  EXPECT_EQ(RunEngine(Admission::kChunked, lengths, fall).occupancy,
            (std::vector<double>{4, 4, 4, 1, 1, 1, 1, 1, 1}));
}

TEST(Admission, NamesReadBack) {
  for (const Admission a : {Admission::kContinuous, Admission::kChunked}) {
    EXPECT_EQ(ParseAdmission(AdmissionName(a)), a);
  }
  EXPECT_EQ(AdmissionName(Admission::kContinuous), "continuous");
  EXPECT_EQ(AdmissionName(Admission::kChunked), "chunked");
  EXPECT_FALSE(ParseAdmission("Chunked").has_value());
  EXPECT_FALSE(ParseAdmission("").has_value());
}

struct TwinRun {
  double tokens = 0.0;
  double rollout_occupancy = 0.0;  // mean over rollout ticks
};

TwinRun RunTwin(const Scenario& s, uint64_t seed, double duration_s) {
  Twin twin(s, seed);
  TwinRun run;
  double rollout_ticks = 0.0;
  while (twin.t_s() < duration_s - 1e-9) {
    twin.Tick();
    if (twin.phase() == Phase::kRollout) {
      run.rollout_occupancy += twin.mean_occupancy();
      rollout_ticks += 1.0;
    }
  }
  run.tokens = twin.tokens_total();
  run.rollout_occupancy /= std::max(1.0, rollout_ticks);
  return run;
}

// a100-14b-tp2 at its default concurrency 32: 64 sequences per rollout on one engine, so two
// chunks, each waiting for its longest. Same seed, so the same completions (common random
// numbers): chunked makes fewer tokens in 10 minutes, at a lower occupancy.
TEST(TwinAdmission, ChunkedMakesFewerTokensInAFixedTimeAtTheSameConcurrencyAndSeed) {
  auto continuous = LoadScenario("a100-14b-tp2");
  ASSERT_TRUE(continuous.ok());
  ASSERT_EQ(continuous->admission, Admission::kContinuous);
  Scenario chunked = *continuous;
  chunked.admission = Admission::kChunked;
  constexpr double kDurationS = 600.0;
  for (const uint64_t seed : {1u, 2u}) {
    SCOPED_TRACE(seed);
    const TwinRun c = RunTwin(*continuous, seed, kDurationS);
    const TwinRun k = RunTwin(chunked, seed, kDurationS);
    EXPECT_GT(c.tokens, 0.0);
    EXPECT_LT(k.tokens, c.tokens);
    EXPECT_LT(k.rollout_occupancy, c.rollout_occupancy);
  }
}

// a100-7b-tp1: 8 sequences per rollout under a limit of 16, so one chunk is the whole rollout:
// chunked and continuous are the same run, tick for tick.
TEST(TwinAdmission, OneChunkPerRolloutIsContinuousAdmission) {
  auto continuous = LoadScenario("a100-7b-tp1");
  ASSERT_TRUE(continuous.ok());
  Scenario chunked = *continuous;
  chunked.admission = Admission::kChunked;
  Twin a(*continuous, 3), b(chunked, 3);
  for (int tick = 0; tick < 20000; ++tick) {
    a.Tick();
    b.Tick();
    ASSERT_EQ(a.power_w(), b.power_w()) << tick;
  }
  EXPECT_EQ(a.tokens_total(), b.tokens_total());
  EXPECT_GT(a.steps_done(), 1);
}

}  // namespace
}  // namespace headroom::twin
