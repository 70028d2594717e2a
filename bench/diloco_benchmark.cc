// The hot paths of `headroom diloco` (docs/PERFORMANCE.md): an inner training step of the byte
// model (libtorch; tokens per second, beside the same step in PyTorch: bench/diloco_compare.sh),
// and per round: int8 encoding with error feedback, the screen + trimmed mean over 4 frames, the
// model's SHA-256, all on the tiny model's 495,360 parameters.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "diloco_core/compress.h"
#include "diloco_core/contribution.h"
#include "diloco_core/digest.h"
#include "lm/corpus.h"
#include "lm/lm.h"

namespace {

using namespace headroom;

std::string Text() {
  std::mt19937_64 rng(1);
  std::string t(1 << 20, ' ');
  for (auto& c : t) c = static_cast<char>('a' + rng() % 26);
  return t;
}

void BM_ByteLmTrainStep(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  const int seq = static_cast<int>(state.range(1));
  const std::string text = Text();
  lm::ByteLm model(lm::ModelByName("tiny").value(), {}, 1, 1);
  lm::BatchSampler sampler(text, batch, seq, 1, 0);
  for (int i = 0; i < 3; ++i) model.TrainStep(sampler.Next());  // warm-up
  for (auto _ : state) benchmark::DoNotOptimize(model.TrainStep(sampler.Next()));
  state.SetItemsProcessed(state.iterations() * batch * seq);  // tokens
}
BENCHMARK(BM_ByteLmTrainStep)->Args({8, 64})->Args({8, 128})->Unit(benchmark::kMillisecond);

std::vector<float> Delta(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1e-3f);
  std::vector<float> d(495360);
  for (auto& x : d) x = n(rng);
  return d;
}

void BM_EncodeInt8(benchmark::State& state) {
  const auto d = Delta(1);
  std::vector<float> error;
  for (auto _ : state) benchmark::DoNotOptimize(diloco::Encode(diloco::Codec::kInt8, d, error));
  state.SetBytesProcessed(state.iterations() * 4 * static_cast<int64_t>(d.size()));
}
BENCHMARK(BM_EncodeInt8)->Unit(benchmark::kMillisecond);

void BM_AggregateRound4(benchmark::State& state) {
  const std::vector<std::uint8_t> key(32, 7);
  std::vector<std::vector<std::uint8_t>> frames;
  const std::vector<std::uint64_t> members = {1, 2, 3, 4};
  for (std::uint32_t r = 0; r < 4; ++r) {
    std::vector<float> error;
    const auto payload = diloco::Encode(diloco::Codec::kInt8, Delta(r + 1), error);
    frames.push_back(diloco::SealFrame({r, 5, members[r]}, diloco::Codec::kInt8, payload, key));
  }
  for (auto _ : state) {
    auto agg = diloco::AggregateRound(frames, 5, members, diloco::Codec::kInt8, 495360, key, {});
    benchmark::DoNotOptimize(agg);
  }
}
BENCHMARK(BM_AggregateRound4)->Unit(benchmark::kMillisecond);

void BM_ModelSha256(benchmark::State& state) {
  const auto d = Delta(9);
  for (auto _ : state) benchmark::DoNotOptimize(diloco::Sha256Floats(d));
  state.SetBytesProcessed(state.iterations() * 4 * static_cast<int64_t>(d.size()));
}
BENCHMARK(BM_ModelSha256)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
