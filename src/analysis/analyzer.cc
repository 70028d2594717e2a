#include "analysis/analyzer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "analysis/kernels.h"
#include "analysis/step_stats.h"
#include "analysis/sum_series.h"
#include "analysis/window_stats.h"

namespace headroom::analysis {

Result<Scope> ParseScope(std::string_view name) {
  if (name == "gpu") return Scope::kGpu;
  if (name == "sum") return Scope::kSum;
  return Error::Usage(fmt::format("unknown scope '{}' (use gpu or sum)", name));
}

std::string_view ScopeName(Scope scope) { return scope == Scope::kGpu ? "gpu" : "sum"; }

static_assert(WindowStats::kMaxLanes == WelchAccumulator::kMaxLanes);

// A batch of whole polls, scanned (see ScanPolls).
struct Analyzer::PollScan {
  std::vector<double> t_s;    // each poll's time
  std::vector<double> sum_w;  // each poll's power summed over GPUs
  double lane_sum_w[WindowStats::kMaxLanes];
  double lane_peak_w[WindowStats::kMaxLanes];
};

// Everything computed on one series: a GPU's own samples (scope gpu) or the sum series.
class Analyzer::SeriesStats {
 public:
  // `schedule`: a moving budget (null: options.budget_w, if any).
  SeriesStats(const AnalyzeOptions& options, SpectrumPool* pool, Envelope* envelope,
              const BudgetSchedule* schedule)
      : ramp_(kRampWindowS, std::nullopt, /*track_ramp=*/true), welch_(pool), envelope_(envelope) {
    const auto window = [&](double w) {
      return schedule != nullptr ? WindowStats(w, schedule) : WindowStats(w, options.budget_w);
    };
    for (double w : options.windows_s) windows_.push_back(window(w));
    if (options.plot_data) {
      for (double w : kCurveWindowsS) curve_.push_back(window(w));
    }
    if (schedule != nullptr) settle_.emplace(schedule);
  }

  // Adds n time-ordered samples.
  void AddBatch(const double* t_s, const double* power_w, size_t n) {
    if (n == 0) return;
    for (WindowStats& w : windows_) w.AddBatch(t_s, power_w, n);
    ramp_.AddBatch(t_s, power_w, n);
    for (WindowStats& w : curve_) w.AddBatch(t_s, power_w, n);
    welch_.AddBatch(t_s, power_w, n);
    if (settle_) settle_->AddRun(t_s, power_w, n);
    if (envelope_ != nullptr) {
      for (size_t i = 0; i < n; ++i) envelope_->Add(t_s[i], power_w[i]);
    }
    sum_w_ += Sum(power_w, n);
    const double batch_peak_w = Max(power_w, n);
    peak_w_ = n_ == 0 ? batch_peak_w : std::max(peak_w_, batch_peak_w);
    n_ += n;
  }

  // Adds `polls` samples to each of `lane_count` series that share their times (see
  // WindowStats::AddPolls). REQUIRES: lanes built from the same options; lane_count <=
  // WindowStats::kMaxLanes; every lane has been given the same times so far.
  // lane_sum_w[g] and lane_peak_w[g]: the sum and the largest of series g's new samples.
  static void AddPolls(SeriesStats* const* lanes, size_t lane_count, const double* t_s,
                       const double* power_w, size_t polls, const double* lane_sum_w,
                       const double* lane_peak_w) {
    if (polls == 0 || lane_count == 0) return;
    WindowStats* windows[WindowStats::kMaxLanes];
    const auto add_windows = [&](auto member, size_t count) {
      for (size_t w = 0; w < count; ++w) {
        for (size_t g = 0; g < lane_count; ++g) windows[g] = &(lanes[g]->*member)[w];
        WindowStats::AddPolls(windows, lane_count, t_s, power_w, polls);
      }
    };
    SeriesStats& lead = *lanes[0];
    add_windows(&SeriesStats::windows_, lead.windows_.size());
    add_windows(&SeriesStats::curve_, lead.curve_.size());
    for (size_t g = 0; g < lane_count; ++g) windows[g] = &lanes[g]->ramp_;
    WindowStats::AddPolls(windows, lane_count, t_s, power_w, polls);
    WelchAccumulator* welch[WindowStats::kMaxLanes];
    for (size_t g = 0; g < lane_count; ++g) welch[g] = &lanes[g]->welch_;
    WelchAccumulator::AddPolls(welch, lane_count, t_s, power_w, polls);
    if (lead.settle_) {
      for (size_t g = 0; g < lane_count; ++g) {
        lanes[g]->settle_->AddRun(t_s, power_w + g, polls, lane_count);
      }
    }
    if (lead.envelope_ != nullptr) {
      for (size_t r = 0; r < polls; ++r) {
        for (size_t g = 0; g < lane_count; ++g) {
          lanes[g]->envelope_->Add(t_s[r], power_w[r * lane_count + g]);
        }
      }
    }
    for (size_t g = 0; g < lane_count; ++g) {
      SeriesStats& s = *lanes[g];
      s.sum_w_ += lane_sum_w[g];
      s.peak_w_ = s.n_ == 0 ? lane_peak_w[g] : std::max(s.peak_w_, lane_peak_w[g]);
      s.n_ += polls;
    }
  }

  void Finish(double dt_s) {
    for (WindowStats& w : windows_) w.Finish(dt_s);
    ramp_.Finish(dt_s);
    for (WindowStats& w : curve_) w.Finish(dt_s);
    welch_.Finish();
    if (settle_) settle_->Finish();
  }

  const std::vector<WindowStats>& windows() const { return windows_; }
  const std::vector<WindowStats>& curve() const { return curve_; }
  const WindowStats& ramp() const { return ramp_; }
  const std::optional<SettleTracker>& settle() const { return settle_; }
  uint64_t n() const { return n_; }
  double sum_w() const { return sum_w_; }
  double peak_w() const { return peak_w_; }

 private:
  std::vector<WindowStats> windows_;
  std::vector<WindowStats> curve_;
  WindowStats ramp_;
  WelchAccumulator welch_;
  std::optional<SettleTracker> settle_;  // a moving budget only
  Envelope* envelope_;
  double sum_w_ = 0.0;
  double peak_w_ = 0.0;
  uint64_t n_ = 0;
};

struct Analyzer::Gpu {
  std::optional<SeriesStats> series;  // scope gpu
  TimeSeries samples;                 // scope sum
  std::vector<double> run_t_s;        // this GPU's samples of the current batch (run_size_)
  std::vector<double> run_power_w;
  bool started = false;
  double first_t_s = 0.0;
  double last_t_s = 0.0;
  double last_power_w = 0.0;
};

struct Analyzer::Steps {
  StepStats stats;
};

Analyzer::Analyzer(AnalyzeOptions options)
    : options_(std::move(options)),
      spectrum_(std::make_unique<SpectrumPool>()),
      steps_(std::make_unique<Steps>()),
      scan_(std::make_unique<PollScan>()) {
  if (options_.plot_data) envelope_.emplace();
  if (options_.budget_schedule) {
    schedule_ = *options_.budget_schedule;
    schedule_mode_ = true;
    decided_budget_ = true;
  } else if (options_.budget_w) {
    decided_budget_ = true;
  }
}

Analyzer::~Analyzer() = default;

Analyzer::Gpu& Analyzer::AddGpus(uint32_t index) {
  while (gpus_.size() <= index) {
    auto gpu = std::make_unique<Gpu>();
    if (options_.scope == Scope::kGpu) {
      gpu->series.emplace(options_, spectrum_.get(), envelope_ ? &*envelope_ : nullptr,
                          ScheduleOrNull());
    }
    gpus_.push_back(std::move(gpu));
  }
  return *gpus_[index];
}

namespace {

// Whether the batch is whole polls of `gpus` GPUs: every GPU once per poll, in dense-index order,
// all at the poll's time (how headroom and most loggers write a long trace). If so, `scan` holds
// each poll's time and power summed over GPUs, and each GPU's sum and largest power. One pass;
// kLanes > 0 fixes the GPU count at compile time (the loops unroll).
template <size_t kLanes>
bool ScanPollsOf(const trace::SampleBatch& batch, size_t gpus_at_run_time,
                 Analyzer::PollScan& scan) {
  const size_t gpus = kLanes > 0 ? kLanes : gpus_at_run_time;
  const size_t n = batch.size();
  const size_t polls = n / gpus;
  scan.t_s.resize(polls);
  scan.sum_w.resize(polls);
  const uint32_t* gpu = batch.gpu.data();
  const double* t_s = batch.t_s.data();
  const double* power_w = batch.power_w.data();
  double lane_sum_w[WindowStats::kMaxLanes], lane_peak_w[WindowStats::kMaxLanes];
  for (size_t g = 0; g < gpus; ++g) lane_sum_w[g] = 0.0, lane_peak_w[g] = power_w[g];
  uint32_t differ = 0;
  for (size_t r = 0; r < polls; ++r) {
    const size_t base = r * gpus;
    const double t = t_s[base];
    double sum_w = 0.0;
    for (size_t g = 0; g < gpus; ++g) {
      differ |=
          (gpu[base + g] ^ static_cast<uint32_t>(g)) | static_cast<uint32_t>(t_s[base + g] != t);
      const double p = power_w[base + g];
      sum_w += p;
      lane_sum_w[g] += p;
      lane_peak_w[g] = std::max(lane_peak_w[g], p);
    }
    scan.t_s[r] = t;
    scan.sum_w[r] = sum_w;
  }
  std::copy(lane_sum_w, lane_sum_w + gpus, scan.lane_sum_w);
  std::copy(lane_peak_w, lane_peak_w + gpus, scan.lane_peak_w);
  return differ == 0;
}

bool ScanPolls(const trace::SampleBatch& batch, size_t gpus, Analyzer::PollScan& scan) {
  if (gpus == 0 || gpus > WindowStats::kMaxLanes || batch.size() % gpus != 0) return false;
  switch (gpus) {
    case 8:
      return ScanPollsOf<8>(batch, 8, scan);
    default:
      return ScanPollsOf<0>(batch, gpus, scan);
  }
}

}  // namespace

void Analyzer::OnBatch(const trace::SampleBatch& batch, const trace::TraceSchema& schema) {
  const size_t n = batch.size();
  if (n == 0) return;
  if (!decided_budget_) {  // no budget given: the trace's column, if it has one
    decided_budget_ = true;
    budget_column_ = schedule_mode_ = schema.Has(trace::Field::kBudgetW);
  }
  if (budget_column_) AddBudgets(batch);
  AddTokens(batch, schema);
  if (options_.plot_data) AddActuation(batch, schema);
  // While every batch is whole polls of the same GPUs, each GPU has had the same times, and the
  // time arithmetic of every statistic is done once per poll for all of them.
  if (lockstep_) {
    const size_t gpus = schema.gpu_ids.size();
    if (options_.scope == Scope::kGpu && (lockstep_gpus_ == 0 || lockstep_gpus_ == gpus) &&
        ScanPolls(batch, gpus, *scan_)) {
      OnPolls(batch, gpus);
      return;
    }
    lockstep_ = false;
  }
  // Gather each GPU's samples of the batch (a batch usually interleaves GPUs), then run every
  // statistic over each GPU's run at once. (A counting sort into one array measured slower.)
  // Every GPU of the batch is in the schema; each run buffer is first sized to hold its GPU's
  // samples of the batch (a count, not the whole batch: memory per GPU follows its data), so
  // the gather writes through plain pointers.
  if (!schema.gpu_ids.empty()) GpuAt(static_cast<uint32_t>(schema.gpu_ids.size() - 1));
  const size_t gpus = gpus_.size();
  run_t_s_.resize(gpus);
  run_power_w_.resize(gpus);
  run_size_.assign(gpus, 0);
  for (size_t i = 0; i < n; ++i) ++run_size_[batch.gpu[i]];
  for (size_t g = 0; g < gpus; ++g) {
    Gpu& gpu = *gpus_[g];
    if (gpu.run_t_s.size() < run_size_[g]) {
      gpu.run_t_s.resize(run_size_[g]);
      gpu.run_power_w.resize(run_size_[g]);
    }
    run_size_[g] = 0;
    run_t_s_[g] = gpu.run_t_s.data();
    run_power_w_[g] = gpu.run_power_w.data();
  }
  double* const* run_t_s = run_t_s_.data();
  double* const* run_power_w = run_power_w_.data();
  size_t* run_size = run_size_.data();
  for (size_t i = 0; i < n; ++i) {
    const uint32_t g = batch.gpu[i];
    assert(g < gpus);  // SampleSink: the schema holds every GPU of the batch
    const size_t k = run_size[g]++;
    run_t_s[g][k] = batch.t_s[i];
    run_power_w[g][k] = batch.power_w[i];
  }
  StepStats& steps = steps_->stats;
  for (size_t g = 0; g < gpus; ++g) {
    Gpu& gpu = *gpus_[g];
    const size_t m = run_size[g];
    if (m == 0) continue;
    const double* t_s = gpu.run_t_s.data();
    const double* power_w = gpu.run_power_w.data();
    if (!gpu.started) {
      gpu.started = true;
      gpu.first_t_s = t_s[0];
      steps.AddRun(t_s[0], power_w[0], t_s + 1, power_w + 1, m - 1);
    } else {
      steps.AddRun(gpu.last_t_s, gpu.last_power_w, t_s, power_w, m);
    }
    gpu.last_t_s = t_s[m - 1];
    gpu.last_power_w = power_w[m - 1];
    if (options_.scope == Scope::kGpu) {
      gpu.series->AddBatch(t_s, power_w, m);
    } else {
      gpu.samples.t_s.insert(gpu.samples.t_s.end(), t_s, t_s + m);
      gpu.samples.power_w.insert(gpu.samples.power_w.end(), power_w, power_w + m);
    }
  }
  samples_ += n;
}

void Analyzer::AddTokens(const trace::SampleBatch& batch, const trace::TraceSchema& schema) {
  if (!schema.Has(trace::Field::kTokens)) return;
  const auto& tokens = batch.fields[trace::FieldIndex(trace::Field::kTokens)];
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!std::isnan(tokens[i])) tokens_ += tokens[i];
  }
}

void Analyzer::AddActuation(const trace::SampleBatch& batch, const trace::TraceSchema& schema) {
  // The job's settings, once per poll: the first GPU's rows (every GPU's repeat them).
  const auto add = [&](trace::Field field, std::optional<Envelope>& envelope) {
    if (!schema.Has(field)) return;
    const auto& values = batch.fields[trace::FieldIndex(field)];
    for (size_t i = 0; i < batch.size(); ++i) {
      if (batch.gpu[i] != 0 || std::isnan(values[i])) continue;
      if (!envelope) envelope.emplace();
      envelope->Add(batch.t_s[i], values[i]);
    }
  };
  add(trace::Field::kConcurrency, concurrency_);
  add(trace::Field::kGroupSize, group_size_);
}

void Analyzer::AddBudgets(const trace::SampleBatch& batch) {
  const auto& budget = batch.fields[trace::FieldIndex(trace::Field::kBudgetW)];
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch.gpu[i] != 0) continue;
    const double w = budget[i];
    if (std::isnan(w)) continue;  // a row without one: the budget in force stays
    if (!(w > 0.0 && w <= trace::kMaxPowerW)) {
      if (bad_budget_.empty()) {
        bad_budget_ = fmt::format(
            "field 'budget_w': {} at t_s={} (the first GPU): expected watts "
            "in (0, {}]",
            w, batch.t_s[i], trace::kMaxPowerW);
      }
      continue;
    }
    if (!schedule_.empty() && batch.t_s[i] < schedule_.points().back().t_s) continue;
    schedule_.Append(batch.t_s[i], w);
  }
}

void Analyzer::OnPolls(const trace::SampleBatch& batch, size_t gpus) {
  const size_t polls = batch.size() / gpus;
  GpuAt(static_cast<uint32_t>(gpus - 1));
  if (lockstep_gpus_ == 0) {
    lockstep_gpus_ = gpus;
    lanes_.clear();
    for (size_t g = 0; g < gpus; ++g) lanes_.push_back(&*gpus_[g]->series);
  }
  const PollScan& scan = *scan_;
  const double* t_s = scan.t_s.data();
  const double* sum_w = scan.sum_w.data();
  const double* power_w = batch.power_w.data();
  // Steps: every GPU steps by the same time; the poll's trapezoids share it.
  StepStats& steps = steps_->stats;
  size_t first = 0;
  double prev_t_s = 0.0, prev_sum_w = 0.0;
  if (!gpus_[0]->started) {
    for (size_t g = 0; g < gpus; ++g) {
      gpus_[g]->started = true;
      gpus_[g]->first_t_s = t_s[0];
    }
    prev_t_s = t_s[0];
    prev_sum_w = sum_w[0];
    first = 1;
  } else {
    prev_t_s = gpus_[0]->last_t_s;
    prev_sum_w = lockstep_last_sum_w_;
  }
  for (size_t r = first; r < polls; ++r) {
    const double step_s = t_s[r] - prev_t_s;
    steps.Add(step_s, 0.5 * (sum_w[r] + prev_sum_w) * step_s, gpus);
    prev_t_s = t_s[r];
    prev_sum_w = sum_w[r];
  }
  lockstep_last_sum_w_ = prev_sum_w;
  for (size_t g = 0; g < gpus; ++g) {
    gpus_[g]->last_t_s = t_s[polls - 1];
    gpus_[g]->last_power_w = power_w[(polls - 1) * gpus + g];
  }
  SeriesStats::AddPolls(lanes_.data(), gpus, t_s, power_w, polls, scan.lane_sum_w,
                        scan.lane_peak_w);
  samples_ += batch.size();
}

namespace {

// Pools window statistics of several series of the same window length.
WindowResult PoolWindows(double window_s, bool has_budget,
                         const std::vector<const WindowStats*>& parts) {
  WindowResult r;
  r.window_s = window_s;
  for (const WindowStats* w : parts) {
    r.windows_counted += w->counted();
    r.windows_over_budget += w->over_budget();
    if (auto max_w = w->max_power_w()) {
      r.max_window_power_w =
          r.max_window_power_w ? std::max(*r.max_window_power_w, *max_w) : *max_w;
    }
  }
  if (has_budget && r.windows_counted > 0) {
    r.violation_fraction =
        static_cast<double>(r.windows_over_budget) / static_cast<double>(r.windows_counted);
  }
  return r;
}

}  // namespace

Result<AnalyzeResult> Analyzer::Finish(const trace::TraceSchema& schema) {
  if (samples_ == 0) return Error::Input("the trace has no samples");
  if (!bad_budget_.empty()) return Error::Input(bad_budget_);
  if (budget_column_ && schedule_.empty()) {
    return Error::Input("field 'budget_w': the first GPU's rows have none");
  }
  AnalyzeResult result;
  result.samples = samples_;
  result.scope = options_.scope;
  result.budget_w = options_.budget_w;

  const StepStats::Summary steps = steps_->stats.Finish();
  if (steps.dt_s) {  // one sample per GPU has no step, and no step to refuse
    if (auto step = TraceStep(steps); !step) return std::move(step).error();
  }
  result.dt_s = steps.dt_s;
  result.energy_j = steps.energy_j;
  result.gaps = steps.gaps;
  const double dt_s = steps.dt_s.value_or(0.0);

  double first_s = std::numeric_limits<double>::infinity();
  double last_s = -std::numeric_limits<double>::infinity();
  std::vector<SeriesStats*> series;
  std::optional<SeriesStats> sum_series;
  for (auto& gpu : gpus_) {
    if (!gpu->started) continue;
    ++result.gpus;
    first_s = std::min(first_s, gpu->first_t_s);
    last_s = std::max(last_s, gpu->last_t_s);
    if (options_.scope == Scope::kGpu) series.push_back(&*gpu->series);
  }
  result.duration_s = last_s - first_s;

  if (options_.scope == Scope::kSum) {
    std::vector<const TimeSeries*> parts;
    for (auto& gpu : gpus_) {
      if (gpu->started) parts.push_back(&gpu->samples);
    }
    auto grid = SumOnGrid(parts, dt_s);
    if (!grid) return std::move(grid).error();
    // A column's budget is per GPU; the sum's is that times the GPUs.
    const BudgetSchedule* schedule = ScheduleOrNull();
    if (budget_column_) {
      sum_schedule_ = schedule_.Scaled(static_cast<double>(result.gpus));
      schedule = &sum_schedule_;
    }
    sum_series.emplace(options_, spectrum_.get(), envelope_ ? &*envelope_ : nullptr, schedule);
    std::vector<double> times(grid->power_w.size());
    for (size_t i = 0; i < times.size(); ++i) times[i] = grid->TimeAt(i);
    sum_series->AddBatch(times.data(), grid->power_w.data(), times.size());
    series.push_back(&*sum_series);
  }

  uint64_t n = 0;
  double sum_w = 0.0;
  for (SeriesStats* s : series) {
    s->Finish(dt_s);
    result.peak_power_w = n == 0 ? s->peak_w() : std::max(result.peak_power_w, s->peak_w());
    n += s->n();
    sum_w += s->sum_w();
    if (auto ramp = s->ramp().max_ramp_w_per_s()) {
      result.max_ramp_w_per_s =
          result.max_ramp_w_per_s ? std::max(*result.max_ramp_w_per_s, *ramp) : *ramp;
    }
  }
  result.mean_power_w = sum_w / static_cast<double>(n);

  const auto pool = [&](const std::vector<double>& windows_s, bool curve) {
    std::vector<WindowResult> out;
    for (size_t w = 0; w < windows_s.size(); ++w) {
      std::vector<const WindowStats*> parts;
      for (SeriesStats* s : series) parts.push_back(curve ? &s->curve()[w] : &s->windows()[w]);
      out.push_back(PoolWindows(windows_s[w], schedule_mode_ || options_.budget_w, parts));
    }
    return out;
  };
  result.windows = pool(options_.windows_s, false);
  if (schedule_mode_) {
    const BudgetSchedule& b =
        options_.scope == Scope::kSum && budget_column_ ? sum_schedule_ : schedule_;
    if (!b.moves()) {
      result.budget_w = b.At(first_s);  // a column that never moves: a fixed budget
    } else {
      MovingBudgetResult m;
      m.source = budget_column_ ? "column" : "schedule";
      m.changes = b.points().size() - 1;
      m.min_w = b.MinW();
      m.max_w = b.MaxW();
      m.mean_w = b.MeanW(first_s, last_s + dt_s);
      result.moving_budget = m;
      std::vector<double> settled_s;
      size_t unsettled = 0;
      for (SeriesStats* s : series) {
        settled_s.insert(settled_s.end(), s->settle()->settled_s().begin(),
                         s->settle()->settled_s().end());
        unsettled += s->settle()->unsettled();
      }
      result.settle = SummarizeSettle(std::move(settled_s), unsettled);
    }
  }
  if (options_.plot_data) result.curve = pool(kCurveWindowsS, true);

  if (schema.Has(trace::Field::kTokens)) {
    result.tokens = tokens_;
    if (result.energy_j > 0.0)
      result.tokens_per_mwh = tokens_ / (result.energy_j / kJoulesPerMegawattHour);
  }
  if (options_.nameplate_w) {
    result.nameplate_w = options_.scope == Scope::kGpu
                             ? *options_.nameplate_w
                             : *options_.nameplate_w * static_cast<double>(result.gpus);
    result.peak_fraction_of_nameplate = result.peak_power_w / *result.nameplate_w;
  }
  if (dt_s > 0.0) {
    result.spectrum = spectrum_->Result(dt_s, options_.band_lo_hz, options_.band_hi_hz);
    result.has_spectrum = true;
  }
  result.envelope = envelope_;
  result.concurrency = concurrency_;
  result.group_size = group_size_;
  return result;
}

}  // namespace headroom::analysis
