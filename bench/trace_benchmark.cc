// Trace reading: the hot path of `headroom analyze`.
#include <benchmark/benchmark.h>

#include "bench_data.h"
#include "trace/number_parse.h"
#include "trace/reader.h"

namespace headroom::bench {
namespace {

class CountingSink final : public trace::SampleSink {
 public:
  void OnBatch(const trace::SampleBatch& batch, const trace::TraceSchema&) override {
    samples += batch.size();
  }
  size_t samples = 0;
};

void BM_ReadLongTrace(benchmark::State& state) {
  const std::string csv = LongTraceCsv(static_cast<size_t>(state.range(0)), 8);
  for (auto _ : state) {
    trace::MemorySource source(csv);
    CountingSink sink;
    auto summary = trace::ReadTrace(source, "bench.csv", {}, sink);
    benchmark::DoNotOptimize(sink.samples);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * csv.size()));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_ReadLongTrace)->Arg(1 << 20);

void BM_ParsePlainDecimal(benchmark::State& state) {
  const char* texts[] = {"249999.9,", "310.37,", "0.1,", "69.85,"};
  size_t i = 0;
  for (auto _ : state) {
    double v;
    benchmark::DoNotOptimize(trace::ParsePlainDecimal(texts[i++ & 3], v));
    benchmark::DoNotOptimize(v);
  }
}
BENCHMARK(BM_ParsePlainDecimal);

void BM_FastFloatFromChars(benchmark::State& state) {  // the library's own path, for scale
  const std::string texts[] = {"249999.9", "310.37", "0.1", "69.85"};
  size_t i = 0;
  for (auto _ : state) {
    const std::string& s = texts[i++ & 3];
    double v;
    benchmark::DoNotOptimize(trace::ParseDouble(s.data(), s.data() + s.size(), v));
    benchmark::DoNotOptimize(v);
  }
}
BENCHMARK(BM_FastFloatFromChars);

}  // namespace
}  // namespace headroom::bench
