// `headroom analyze`: every statistic of a power trace, streamed.
//
// The definitions are in docs/METRICS.md and nowhere else; this file implements them. Scope `gpu`
// streams: memory does not grow with trace length. Scope `sum` keeps the samples, to align the
// GPUs on one grid.
//
// Two paths give the same numbers. While every batch is whole polls (each GPU once, in the same
// order, at the poll's time), the GPUs are in lockstep and each statistic does its time
// arithmetic once per poll for all of them; from the first batch that is not, each GPU's samples
// are gathered and run through the statistics on their own.
//
// Not thread-safe: one Analyzer per trace.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "analysis/budget_schedule.h"
#include "analysis/envelope.h"
#include "analysis/spectrum.h"
#include "common/error.h"
#include "trace/reader.h"

namespace headroom::analysis {

enum class Scope { kGpu, kSum };
Result<Scope> ParseScope(std::string_view name);  // gpu|sum
std::string_view ScopeName(Scope scope);

inline const std::vector<double> kDefaultWindowsS = {0.5, 30.0, 300.0};
// Window lengths of the report's "violations against window length" curve.
inline const std::vector<double> kCurveWindowsS = {0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800};
inline constexpr double kRampWindowS = 1.0;

struct AnalyzeOptions {
  Scope scope = Scope::kGpu;
  std::vector<double> windows_s = kDefaultWindowsS;
  std::optional<double> budget_w;  // of the series: per GPU (gpu) or of the sum (sum)
  // A budget that moves, in the same units as budget_w (exclusive with it). Without either, a
  // trace's budget_w column (per GPU; read from its first GPU's rows) is the budget.
  std::optional<BudgetSchedule> budget_schedule;
  std::optional<double> nameplate_w;  // per GPU
  double band_lo_hz = kDefaultBandLoHz;
  double band_hi_hz = kDefaultBandHiHz;
  bool plot_data = false;  // keep an envelope and a violation curve for the HTML report
};

struct WindowResult {
  double window_s = 0.0;
  uint64_t windows_counted = 0;
  uint64_t windows_over_budget = 0;
  std::optional<double> violation_fraction;  // none without a budget or without windows
  std::optional<double> max_window_power_w;
};

// The budget the windows were scored against, when it is not one fixed number.
struct MovingBudgetResult {
  std::string source;  // "schedule" or "column"
  size_t changes = 0;  // change points after the first
  double min_w = 0.0;  // of the series (scope gpu: per GPU; sum: of the sum)
  double max_w = 0.0;
  double mean_w = 0.0;  // time-weighted over the trace
};

struct AnalyzeResult {
  uint64_t samples = 0;
  uint32_t gpus = 0;
  double duration_s = 0.0;
  Scope scope = Scope::kGpu;
  std::optional<double> budget_w;  // a fixed budget (or a budget column that never moves)
  std::optional<MovingBudgetResult> moving_budget;  // when it moves
  std::optional<SettleSummary> settle;              // when it moves: the decreases of every series
  std::optional<double> dt_s;
  double energy_j = 0.0;
  double mean_power_w = 0.0;
  double peak_power_w = 0.0;
  uint64_t gaps = 0;
  std::vector<WindowResult> windows;
  std::optional<double> max_ramp_w_per_s;
  std::optional<double> tokens;
  std::optional<double> tokens_per_mwh;
  std::optional<double> nameplate_w;  // of the series: per GPU (gpu) or all GPUs (sum)
  std::optional<double> peak_fraction_of_nameplate;
  SpectrumResult spectrum;
  bool has_spectrum = false;  // false without a positive dt

  // Plot data (AnalyzeOptions::plot_data).
  std::vector<WindowResult> curve;
  std::optional<Envelope> envelope;
  // The actuation an agent's trace records (its concurrency and group_size columns), over
  // time; none when the trace has no such column.
  std::optional<Envelope> concurrency, group_size;
};

inline constexpr double kJoulesPerMegawattHour = 3.6e9;

class Analyzer final : public trace::SampleSink {
 public:
  explicit Analyzer(AnalyzeOptions options);
  ~Analyzer() override;
  Analyzer(const Analyzer&) = delete;
  Analyzer& operator=(const Analyzer&) = delete;

  void OnBatch(const trace::SampleBatch& batch, const trace::TraceSchema& schema) override;

  // REQUIRES: called once, after the last batch. Fails without samples, or (scope sum) when the
  // GPUs cannot be aligned.
  Result<AnalyzeResult> Finish(const trace::TraceSchema& schema);

 private:
  struct Gpu;
  class SeriesStats;

 public:
  struct PollScan;  // a batch of whole polls, scanned (analyzer.cc)

 private:
  Gpu& GpuAt(uint32_t index) {
    if (index < gpus_.size()) [[likely]] {
      return *gpus_[index];
    }
    return AddGpus(index);
  }
  Gpu& AddGpus(uint32_t index);
  void AddTokens(const trace::SampleBatch& batch, const trace::TraceSchema& schema);
  // The first GPU's budget_w rows into schedule_ (budget from the column).
  void AddBudgets(const trace::SampleBatch& batch);
  const BudgetSchedule* ScheduleOrNull() const { return schedule_mode_ ? &schedule_ : nullptr; }
  // A batch of whole polls while every GPU has had the same times (scope gpu).
  void OnPolls(const trace::SampleBatch& batch, size_t gpus);

  AnalyzeOptions options_;
  std::vector<std::unique_ptr<Gpu>> gpus_;
  std::unique_ptr<SpectrumPool> spectrum_;
  std::optional<Envelope> envelope_;
  std::optional<Envelope> concurrency_, group_size_;  // plot_data, from the first GPU's rows
  void AddActuation(const trace::SampleBatch& batch, const trace::TraceSchema& schema);
  struct Steps;
  std::unique_ptr<Steps> steps_;
  uint64_t samples_ = 0;
  double tokens_ = 0.0;
  // The moving budget: given, or read from the column (decided at the first batch).
  bool decided_budget_ = false;
  bool schedule_mode_ = false;
  bool budget_column_ = false;
  BudgetSchedule schedule_;
  BudgetSchedule sum_schedule_;  // scope sum with a column: schedule_ x GPUs
  std::string bad_budget_;       // the first unusable budget_w value, reported by Finish
  // OnBatch's gather: per GPU, where its run goes and how long it is.
  std::vector<double*> run_t_s_;
  std::vector<double*> run_power_w_;
  std::vector<size_t> run_size_;
  // Lockstep: every batch so far was whole polls of lockstep_gpus_ GPUs (0: none yet).
  bool lockstep_ = true;
  size_t lockstep_gpus_ = 0;
  std::vector<SeriesStats*> lanes_;   // each GPU's series, in dense order
  std::unique_ptr<PollScan> scan_;    // the current batch's polls
  double lockstep_last_sum_w_ = 0.0;  // the last poll's power summed over GPUs
};

}  // namespace headroom::analysis
