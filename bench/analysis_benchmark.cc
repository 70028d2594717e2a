// Window statistics, steps, spectrum and the whole analyzer over in-memory samples.
#include <benchmark/benchmark.h>

#include "analysis/analyzer.h"
#include "analysis/spectrum.h"
#include "analysis/step_stats.h"
#include "analysis/window_stats.h"
#include "bench_data.h"
#include "trace/reader.h"
#include "trace/threaded_sink.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

// Eight series sharing their times (GPUs polled together), 1 M samples in all: the lockstep
// path of `headroom analyze`. Compare items/s with BM_WindowStats.
void BM_WindowStatsPolls(benchmark::State& state) {
  constexpr size_t kLanes = 8;
  const Series s = SeriesOf(1 << 20);
  const size_t polls = s.t_s.size() / kLanes;
  const double window_s = static_cast<double>(state.range(0)) / 10.0;
  for (auto _ : state) {
    std::vector<analysis::WindowStats> lanes(kLanes, analysis::WindowStats(window_s, 400.0));
    analysis::WindowStats* pointers[kLanes];
    for (size_t g = 0; g < kLanes; ++g) pointers[g] = &lanes[g];
    // Poll r's time is s.t_s[r]; its powers are the next eight samples.
    for (size_t r = 0; r < polls; r += kBatch) {
      const size_t n = std::min(kBatch, polls - r);
      analysis::WindowStats::AddPolls(pointers, kLanes, &s.t_s[r], &s.power_w[r * kLanes], n);
    }
    for (auto& w : lanes) w.Finish(0.1);
    benchmark::DoNotOptimize(lanes[0].counted());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(polls * kLanes));
}
BENCHMARK(BM_WindowStatsPolls)->Arg(5)->Arg(300)->Arg(3000);

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

// The same for eight series sharing their times; compare items/s with BM_WelchSpectrum.
void BM_WelchSpectrumPolls(benchmark::State& state) {
  constexpr size_t kLanes = 8;
  const Series s = SeriesOf(1 << 20);
  const size_t polls = s.t_s.size() / kLanes;
  for (auto _ : state) {
    analysis::SpectrumPool pool;
    std::vector<analysis::WelchAccumulator> lanes(kLanes, analysis::WelchAccumulator(&pool));
    analysis::WelchAccumulator* pointers[kLanes];
    for (size_t g = 0; g < kLanes; ++g) pointers[g] = &lanes[g];
    for (size_t r = 0; r < polls; r += kBatch) {
      const size_t n = std::min(kBatch, polls - r);
      analysis::WelchAccumulator::AddPolls(pointers, kLanes, &s.t_s[r], &s.power_w[r * kLanes], n);
    }
    for (auto& w : lanes) w.Finish();
    benchmark::DoNotOptimize(pool.Result(0.1, 0.1, 20.0).band_fraction);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(polls * kLanes));
}
BENCHMARK(BM_WelchSpectrumPolls);

// Reading plus every statistic: `headroom analyze --scope gpu` without the file system.
void AnalyzeCsv(benchmark::State& state, const std::string& csv,
                const std::optional<analysis::BudgetSchedule>& schedule = std::nullopt) {
  for (auto _ : state) {
    trace::MemorySource source(csv);
    analysis::AnalyzeOptions options;
    if (schedule) {
      options.budget_schedule = *schedule;
    } else {
      options.budget_w = 400.0;
    }
    analysis::Analyzer analyzer(options);
    auto summary = trace::ReadTrace(source, "bench.csv", {}, analyzer);
    auto result = analyzer.Finish(summary->schema);
    benchmark::DoNotOptimize(result->energy_j);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * csv.size()));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void BM_AnalyzeTrace(benchmark::State& state) {
  AnalyzeCsv(state, LongTraceCsv(static_cast<size_t>(state.range(0)), 8));
}
BENCHMARK(BM_AnalyzeTrace)->Arg(1 << 20);

// The passes apart (issue 57): the same trace parsed once into batches, then only the
// statistics (every window, steps, Welch) over those batches: what the reader's thread hands
// the analysis thread with --threads 2. BM_ReadLongTrace (trace_benchmark) is the parse alone.
void BM_AnalyzeBatchesOnly(benchmark::State& state) {
  const std::string csv = LongTraceCsv(static_cast<size_t>(state.range(0)), 8);
  trace::MemorySource source(csv);
  trace::ReadSummary read;
  struct Keep final : trace::SampleSink {
    std::vector<trace::SampleBatch> batches;
    void OnBatch(const trace::SampleBatch& b, const trace::TraceSchema&) override {
      batches.push_back(b);
    }
  } keep;
  auto summary = trace::ReadTrace(source, "bench.csv", {}, keep);
  for (auto _ : state) {
    analysis::AnalyzeOptions options;
    options.budget_w = 400.0;
    analysis::Analyzer analyzer(options);
    for (const auto& b : keep.batches) analyzer.OnBatch(b, summary->schema);
    auto result = analyzer.Finish(summary->schema);
    benchmark::DoNotOptimize(result->energy_j);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_AnalyzeBatchesOnly)->Arg(1 << 20);

// Reading and analysing at once (`analyze --threads 2`, trace::ThreadedSink), beside
// BM_AnalyzeTrace (one thread); real time, since the work is on two threads.
void BM_AnalyzeTraceTwoThreads(benchmark::State& state) {
  const std::string csv = LongTraceCsv(static_cast<size_t>(state.range(0)), 8);
  for (auto _ : state) {
    trace::MemorySource source(csv);
    analysis::AnalyzeOptions options;
    options.budget_w = 400.0;
    analysis::Analyzer analyzer(options);
    trace::ThreadedSink threaded(analyzer);
    auto summary = trace::ReadTrace(source, "bench.csv", {}, threaded);
    threaded.Finish();
    auto result = analyzer.Finish(summary->schema);
    benchmark::DoNotOptimize(result->energy_j);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * csv.size()));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_AnalyzeTraceTwoThreads)->Arg(1 << 20)->UseRealTime();

// The same trace against a budget that moves every 30 s (windows against its time-weighted
// mean, settle_s of every decrease): the cost of a moving budget, beside BM_AnalyzeTrace.
void BM_AnalyzeTraceMovingBudget(benchmark::State& state) {
  const std::string csv = LongTraceCsv(static_cast<size_t>(state.range(0)), 8);
  analysis::BudgetSchedule schedule;
  for (int k = 0; k < 100000; ++k) schedule.Append(30.0 * k, k % 2 == 0 ? 400.0 : 320.0);
  AnalyzeCsv(state, csv, schedule);
}
BENCHMARK(BM_AnalyzeTraceMovingBudget)->Arg(1 << 20);

// The same trace with every poll's GPUs listed in reverse order after the first poll: each GPU
// is analysed on its own (the path for traces whose polls are not whole), for comparison.
void BM_AnalyzeTraceGpuByGpu(benchmark::State& state) {
  const std::string polled = LongTraceCsv(static_cast<size_t>(state.range(0)), 8);
  std::string csv;
  {
    // Lines 1..8 (header, first poll) as they are; then each poll of 8 lines reversed.
    std::vector<std::string_view> lines;
    for (size_t start = 0; start < polled.size();) {
      const size_t nl = polled.find('\n', start);
      lines.emplace_back(polled.data() + start, nl + 1 - start);
      start = nl + 1;
    }
    for (size_t i = 0; i < 9 && i < lines.size(); ++i) csv += lines[i];
    for (size_t i = 9; i + 8 <= lines.size(); i += 8) {
      for (size_t k = 8; k-- > 0;) csv += lines[i + k];
    }
  }
  AnalyzeCsv(state, csv);
}
BENCHMARK(BM_AnalyzeTraceGpuByGpu)->Arg(1 << 20);

}  // namespace
}  // namespace headroom::bench
