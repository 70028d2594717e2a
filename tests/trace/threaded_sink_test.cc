// ThreadedSink (trace/threaded_sink.h): the batches a reader hands it reach the inner sink on a
// thread of its own, every one, in file order, with the schema as it was at that batch; taken
// (swapped) or copied. Checked against the same trace read straight into the same kind of sink.
// TSan runs these (`make test-tsan`).
#include "trace/threaded_sink.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "trace/reader.h"

namespace headroom::trace {
namespace {

// What a sink saw: per batch, its samples and the schema's GPUs and phases at the time, and the
// thread that saw it.
struct Recorder final : SampleSink {
  struct Seen {
    std::vector<uint32_t> gpu;
    std::vector<double> t_s, power_w, tokens;
    std::vector<uint16_t> phase;
    size_t gpus = 0, phases = 0;
    bool operator==(const Seen&) const = default;
  };
  std::vector<Seen> seen;
  std::thread::id thread;
  void OnBatch(const SampleBatch& b, const TraceSchema& schema) override {
    Seen s;
    s.gpu.assign(b.gpu.begin(), b.gpu.begin() + static_cast<std::ptrdiff_t>(b.size()));
    s.t_s.assign(b.t_s.begin(), b.t_s.begin() + static_cast<std::ptrdiff_t>(b.size()));
    s.power_w.assign(b.power_w.begin(), b.power_w.begin() + static_cast<std::ptrdiff_t>(b.size()));
    const auto& tokens = b.fields[FieldIndex(Field::kTokens)];
    if (!tokens.empty()) {
      s.tokens.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(b.size()));
    }
    if (!b.phase.empty()) {
      s.phase.assign(b.phase.begin(), b.phase.begin() + static_cast<std::ptrdiff_t>(b.size()));
    }
    s.gpus = schema.gpu_ids.size();
    s.phases = schema.phase_names.size();
    seen.push_back(std::move(s));
    thread = std::this_thread::get_id();
  }
};

// A long trace whose GPUs and phases appear as it goes: GPU 0 alone, then 1, then 2.
std::string Trace(int rows) {
  std::string text = "t_s,gpu,power_w,tokens,phase\n";
  for (int i = 0; i < rows; ++i) {
    const int gpus = i < rows / 3 ? 1 : (i < 2 * rows / 3 ? 2 : 3);
    for (int g = 0; g < gpus; ++g) {
      text += std::to_string(i * 0.1) + "," + std::to_string(g) + "," +
              std::to_string(100 + (i * 7 + g * 13) % 300) + "," + std::to_string(i % 5) + "," +
              (i % 4 == 0 ? "rollout" : (i % 4 == 1 ? "update" : "")) + "\n";
    }
  }
  return text;
}

// The same trace in the minimal layout (t_s,gpu,power_w: the long parser's fast path, which
// keeps pointers into the batch it fills between flushes).
std::string Minimal(int rows) {
  std::string text = "t_s,gpu,power_w\n";
  for (int i = 0; i < rows; ++i) {
    const int gpus = i < rows / 3 ? 1 : (i < 2 * rows / 3 ? 2 : 3);
    for (int g = 0; g < gpus; ++g) {
      text += std::to_string(i) + "." + std::to_string(i % 10) + "," + std::to_string(g) + "," +
              std::to_string(100 + (i * 7 + g * 13) % 300) + ".25\n";
    }
  }
  return text;
}

class ThreadedSinkLayouts : public ::testing::TestWithParam<bool> {};

TEST_P(ThreadedSinkLayouts, EveryBatchReachesTheInnerSinkInOrderWithTheSchemaAsItWas) {
  const bool minimal = GetParam();
  const std::string text = minimal ? Minimal(400) : Trace(400);
  ReadOptions o;
  o.batch_rows = 7;  // many batches, a few GPUs each: the schema grows between them
  Recorder straight;
  MemorySource a(text);
  auto direct = ReadTrace(a, "x.csv", o, straight);
  ASSERT_TRUE(direct.ok()) << direct.error().message();
  for (size_t depth : {1u, 2u, 8u}) {
    SCOPED_TRACE("depth " + std::to_string(depth));
    Recorder inner;
    MemorySource b(text);
    ThreadedSink threaded(inner, depth);
    auto read = ReadTrace(b, "x.csv", o, threaded);
    threaded.Finish();
    ASSERT_TRUE(read.ok());
    EXPECT_EQ(read->samples, direct->samples);
    ASSERT_EQ(inner.seen.size(), straight.seen.size());
    for (size_t i = 0; i < inner.seen.size(); ++i) {
      ASSERT_EQ(inner.seen[i], straight.seen[i]) << "batch " << i;
    }
    EXPECT_NE(inner.thread, std::this_thread::get_id());  // on the sink's own thread
    EXPECT_EQ(inner.seen.front().gpus, 1u);
    EXPECT_EQ(inner.seen.back().gpus, 3u);
    EXPECT_EQ(inner.seen.back().phases, minimal ? 0u : 2u);
  }
}

INSTANTIATE_TEST_SUITE_P(ThreadedSink, ThreadedSinkLayouts, ::testing::Bool());

TEST(ThreadedSink, ABatchHandedAsConstIsCopiedAndFinishTwiceIsFinishOnce) {
  TraceSchema schema;
  schema.gpu_ids = {"0"};
  SampleBatch batch;
  batch.Reserve(4, schema);
  for (int i = 0; i < 3; ++i) {
    batch.gpu[static_cast<size_t>(i)] = 0;
    batch.t_s[static_cast<size_t>(i)] = i;
    batch.power_w[static_cast<size_t>(i)] = 100.0 + i;
  }
  batch.count = 3;
  Recorder inner;
  ThreadedSink threaded(inner, 2);
  for (int k = 0; k < 5; ++k) {
    threaded.OnBatch(batch, schema);
    batch.power_w[0] += 1.0;  // the caller's batch is its own again at once
  }
  threaded.Finish();
  threaded.Finish();
  ASSERT_EQ(inner.seen.size(), 5u);
  for (size_t k = 0; k < 5; ++k) {
    EXPECT_EQ(inner.seen[k].t_s, (std::vector<double>{0, 1, 2}));
    EXPECT_EQ(inner.seen[k].power_w[0], 100.0 + static_cast<double>(k));
  }
}

}  // namespace
}  // namespace headroom::trace
