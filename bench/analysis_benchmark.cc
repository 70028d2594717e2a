// Window statistics, steps, spectrum and the whole analyzer over in-memory samples.
#include <benchmark/benchmark.h>

#include "analysis/analyzer.h"
#include "analysis/spectrum.h"
#include "analysis/step_stats.h"
#include "analysis/window_stats.h"
#include "bench_data.h"

namespace headroom::bench {
namespace {

constexpr size_t kBatch = 512;

void BM_WindowStats(benchmark::State& state) {
  const Series s = SeriesOf(1 << 20);
  const double window_s = static_cast<double>(state.range(0)) / 10.0;
  for (auto _ : state) {
    analysis::WindowStats w(window_s, 400.0);
    for (size_t i = 0; i < s.t_s.size(); i += kBatch) {
      w.AddBatch(&s.t_s[i], &s.power_w[i], std::min(kBatch, s.t_s.size() - i));
    }
    w.Finish(0.1);
    benchmark::DoNotOptimize(w.counted());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(s.t_s.size()));
}
BENCHMARK(BM_WindowStats)->Arg(5)->Arg(300)->Arg(3000);  // 0.5 s, 30 s, 5 min

void BM_StepStats(benchmark::State& state) {
  const Series s = SeriesOf(1 << 20);
  for (auto _ : state) {
    analysis::StepStats steps;
    for (size_t i = 1; i < s.t_s.size(); ++i) {
      const double step = s.t_s[i] - s.t_s[i - 1];
      steps.Add(step, 0.5 * (s.power_w[i] + s.power_w[i - 1]) * step);
    }
    benchmark::DoNotOptimize(steps.Finish().energy_j);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(s.t_s.size()));
}
BENCHMARK(BM_StepStats);

void BM_WelchSpectrum(benchmark::State& state) {
  const Series s = SeriesOf(1 << 20);
  for (auto _ : state) {
    analysis::SpectrumPool pool;
    analysis::WelchAccumulator welch(&pool);
    for (size_t i = 0; i < s.t_s.size(); i += kBatch) {
      welch.AddBatch(&s.t_s[i], &s.power_w[i], std::min(kBatch, s.t_s.size() - i));
    }
    welch.Finish();
    benchmark::DoNotOptimize(pool.Result(0.1, 0.1, 20.0).band_fraction);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(s.t_s.size()));
}
BENCHMARK(BM_WelchSpectrum);

// Reading plus every statistic: `headroom analyze --scope gpu` without the file system.
void BM_AnalyzeTrace(benchmark::State& state) {
  const std::string csv = LongTraceCsv(static_cast<size_t>(state.range(0)), 8);
  for (auto _ : state) {
    trace::MemorySource source(csv);
    analysis::AnalyzeOptions options;
    options.budget_w = 400.0;
    analysis::Analyzer analyzer(options);
    auto summary = trace::ReadTrace(source, "bench.csv", {}, analyzer);
    auto result = analyzer.Finish(summary->schema);
    benchmark::DoNotOptimize(result->energy_j);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * csv.size()));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_AnalyzeTrace)->Arg(1 << 20);

}  // namespace
}  // namespace headroom::bench
