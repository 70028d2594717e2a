#include "planning/fleet.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "analysis/step_stats.h"
#include "analysis/window_stats.h"
#include "common/stats.h"

namespace headroom::planning {
namespace {

constexpr double kWattsPerKw = 1e3;
constexpr double kJoulesPerMwh = 3.6e9;
constexpr double kKwhPerMwh = 1e3;
constexpr double kGramsPerKg = 1e3;
constexpr double kTokensPerMillion = 1e6;

// A uniform double in [0, 1) from the top 53 bits: the same on every platform.
double Uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace

Result<Offsets> ParseOffsets(std::string_view name) {
  if (name == "random") return Offsets::kRandom;
  if (name == "none") return Offsets::kNone;
  return Error::Usage(fmt::format("unknown --offsets '{}' (use random or none)", name));
}

Result<Job> MakeJob(std::string name, uint32_t copies,
                    std::vector<trace::CollectingSink::Series> samples, bool has_tokens,
                    double nameplate_per_gpu_w) {
  analysis::StepStats steps;
  std::vector<analysis::TimeSeries> series;
  for (const auto& s : samples) {
    if (s.t_s.empty()) continue;
    for (size_t i = 1; i < s.t_s.size(); ++i) steps.Add(s.t_s[i] - s.t_s[i - 1], 0.0);
    series.push_back(analysis::TimeSeries{s.t_s, s.power_w});
  }
  if (series.empty()) return Error::Input(fmt::format("{}: the trace has no samples", name));
  const auto summary = steps.Finish();
  if (!summary.dt_s) {
    return Error::Input(fmt::format("{}: a job needs at least two samples of one GPU", name));
  }
  std::vector<const analysis::TimeSeries*> parts;
  for (const auto& s : series) parts.push_back(&s);
  const auto dt_s = analysis::TraceStep(summary);
  if (!dt_s) return Error::Input(fmt::format("{}: {}", name, dt_s.error().message()));
  auto grid = analysis::SumOnGrid(parts, *dt_s);
  if (!grid) return Error::Input(fmt::format("{}: {}", name, grid.error().message()));
  Job job;
  job.name = std::move(name);
  job.copies = copies;
  job.gpus = static_cast<uint32_t>(series.size());
  job.nameplate_w = nameplate_per_gpu_w * job.gpus;
  job.series = std::move(grid).value();
  job.samples = std::move(samples);
  job.has_tokens = has_tokens;
  return job;
}

namespace {

// Fleet grid: tau_i = i * dt for tau_i < D.
size_t GridPoints(double duration_s, double dt_s) {
  size_t points = 0;
  while (static_cast<double>(points) * dt_s < duration_s) ++points;
  return points;
}

uint32_t DistinctTrials(const FleetOptions& options) {
  // Without offsets every trial is the same composition: computed once, counted `trials` times.
  return options.offsets == Offsets::kNone ? 1 : options.trials;
}

uint64_t SaturatingMultiply(uint64_t a, uint64_t b) {
  uint64_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? UINT64_MAX : product;
}

}  // namespace

uint64_t CompositionSamples(const std::vector<Job>& jobs, const FleetOptions& options) {
  double duration_s = std::numeric_limits<double>::infinity();
  double dt_s = std::numeric_limits<double>::infinity();
  uint64_t copies = 0;
  for (const Job& job : jobs) {
    duration_s = std::min(duration_s, job.duration_s());
    dt_s = std::min(dt_s, job.series.dt_s);
    copies += job.copies;
  }
  if (jobs.empty() || !(dt_s > 0.0)) return 0;
  const uint64_t points = GridPoints(duration_s, dt_s);
  return SaturatingMultiply(SaturatingMultiply(points, copies), DistinctTrials(options));
}

double OversubscriptionFactor(double nameplate_w, std::vector<double> peaks_w, double quantile,
                              double margin, double* risk_peak_w) {
  const double peak_w = Quantile(peaks_w, quantile);
  if (risk_peak_w != nullptr) *risk_peak_w = peak_w;
  const double required_w = peak_w * (1.0 + margin);
  return required_w > 0.0 ? nameplate_w / required_w : 0.0;
}

Result<FleetResult> Compose(std::vector<Job>& jobs, const FleetOptions& options) {
  if (jobs.empty()) return Error::Usage("a fleet needs at least one trace");
  if (options.trials == 0) return Error::Usage("--trials must be >= 1");
  if (!(options.quantile >= 0.0 && options.quantile <= 1.0)) {
    return Error::Usage(fmt::format("--quantile must be in [0, 1], got {}", options.quantile));
  }
  if (!(options.margin >= 0.0)) return Error::Usage("--margin must be >= 0");
  if (!(options.risk_window_s > 0.0)) return Error::Usage("--risk-window must be > 0");
  if (options.budget_fraction && !(*options.budget_fraction > 0.0)) {
    return Error::Usage("--budget-fraction must be > 0");
  }
  if (options.budget_w && options.budget_fraction) {
    return Error::Usage("give --budget-w or --budget-fraction, not both");
  }

  FleetResult result;
  result.trials = options.trials;
  result.risk_window_s = options.risk_window_s;
  result.quantile = options.quantile;
  result.margin = options.margin;
  double duration_s = std::numeric_limits<double>::infinity();
  double dt_s = std::numeric_limits<double>::infinity();
  for (const Job& job : jobs) {
    result.gpus += job.gpus * job.copies;
    result.nameplate_w += job.nameplate_w * job.copies;
    duration_s = std::min(duration_s, job.duration_s());
    dt_s = std::min(dt_s, job.series.dt_s);
  }
  result.duration_s = duration_s;
  result.dt_s = dt_s;
  if (options.budget_w) result.budget_w = *options.budget_w;
  if (options.budget_fraction) result.budget_w = *options.budget_fraction * result.nameplate_w;

  const size_t points = GridPoints(duration_s, dt_s);

  // Windows to measure: the requested ones, then the risk window.
  std::vector<double> windows_s = options.windows_s;
  windows_s.push_back(options.risk_window_s);
  std::vector<std::vector<double>> peaks_w(windows_s.size());
  std::vector<uint64_t> counted(windows_s.size(), 0), over(windows_s.size(), 0);

  std::mt19937_64 rng(options.seed);
  std::vector<double> fleet_w(points);
  double energy_j_sum = 0.0;
  const uint32_t distinct_trials = DistinctTrials(options);
  const uint64_t total_samples = CompositionSamples(jobs, options);
  uint64_t samples_done = 0;
  for (uint32_t trial = 0; trial < distinct_trials; ++trial) {
    std::fill(fleet_w.begin(), fleet_w.end(), 0.0);
    for (const Job& job : jobs) {
      const auto& p = job.series.power_w;
      const double job_dt = job.series.dt_s;
      for (uint32_t copy = 0; copy < job.copies; ++copy) {
        const double offset_s =
            options.offsets == Offsets::kRandom ? Uniform01(rng) * duration_s : 0.0;
        for (size_t i = 0; i < points; ++i) {
          double s = static_cast<double>(i) * dt_s + offset_s;
          if (s >= duration_s) s -= duration_s;
          // Sample and hold: the job's last grid point at or before s.
          auto j = static_cast<size_t>(std::floor(s / job_dt + analysis::kWindowEpsilon));
          fleet_w[i] += p[std::min(j, p.size() - 1)];
        }
        samples_done += points;
        if (options.on_progress) options.on_progress(samples_done, total_samples);
      }
    }
    double energy_j = 0.0;
    for (double w : fleet_w) energy_j += w * dt_s;
    energy_j_sum += energy_j;
    if (trial == 0) {
      for (size_t i = 0; i < points; ++i) {
        result.power.Add(static_cast<double>(i) * dt_s, fleet_w[i]);
      }
    }
    for (size_t w = 0; w < windows_s.size(); ++w) {
      analysis::WindowStats stats(windows_s[w], result.budget_w);
      for (size_t i = 0; i < points; ++i) stats.Add(static_cast<double>(i) * dt_s, fleet_w[i]);
      stats.Finish(dt_s);
      if (auto peak_w = stats.max_power_w()) peaks_w[w].push_back(*peak_w);
      counted[w] += stats.counted();
      over[w] += stats.over_budget();
    }
  }

  if (distinct_trials < options.trials) {
    for (size_t w = 0; w < windows_s.size(); ++w) {
      if (!peaks_w[w].empty()) peaks_w[w].assign(options.trials, peaks_w[w][0]);
      counted[w] *= options.trials;
      over[w] *= options.trials;
    }
    energy_j_sum *= options.trials;
  }
  for (size_t w = 0; w + 1 < windows_s.size(); ++w) {
    FleetWindow fw;
    fw.window_s = windows_s[w];
    for (double peak_w : peaks_w[w]) fw.peak_fractions.push_back(peak_w / result.nameplate_w);
    if (!fw.peak_fractions.empty()) {
      std::vector<double> sorted = fw.peak_fractions;
      fw.peak_fraction_p50 = Quantile(sorted, 0.5);
      fw.peak_fraction_p95 = Quantile(sorted, 0.95);
      fw.peak_fraction_max = sorted.back();
    }
    if (result.budget_w && counted[w] > 0) {
      fw.violation_fraction = static_cast<double>(over[w]) / static_cast<double>(counted[w]);
    }
    result.windows.push_back(std::move(fw));
  }

  std::vector<double> risk = peaks_w.back();
  if (risk.empty()) {
    return Error::Usage(fmt::format("--risk-window {} s is longer than the fleet's duration {} s",
                                    options.risk_window_s, duration_s));
  }
  result.oversubscription_factor = OversubscriptionFactor(
      result.nameplate_w, std::move(risk), options.quantile, options.margin, &result.risk_peak_w);
  const double required_w = result.risk_peak_w * (1.0 + options.margin);

  Economics& e = result.economics;
  e.freed_capacity_kw = (result.nameplate_w - required_w) / kWattsPerKw;
  e.freed_capacity_usd_per_year = e.freed_capacity_kw * options.capacity_cost_usd_per_kw_year;
  e.energy_mwh = energy_j_sum / options.trials / kJoulesPerMwh;
  e.energy_cost_usd = e.energy_mwh * options.energy_price_usd_per_mwh;
  e.carbon_kg = e.energy_mwh * kKwhPerMwh * options.carbon_g_per_kwh / kGramsPerKg;

  // Tokens: a copy wrapped over [0, D) holds exactly the job's first D seconds, whatever the
  // offset.
  bool all_tokens = true;
  double tokens = 0.0;
  for (Job& job : jobs) {
    if (!job.has_tokens) {
      all_tokens = false;
      continue;
    }
    const double from_s = job.series.t_start_s;
    const double to_s = from_s + duration_s;
    double job_tokens = 0.0;
    for (const auto& s : job.samples) {
      for (size_t i = 0; i < s.tokens.size(); ++i) {
        if (s.t_s[i] >= from_s && s.t_s[i] < to_s) job_tokens += s.tokens[i];
      }
    }
    job.tokens_in_duration = job_tokens;
    tokens += job_tokens * job.copies;
  }
  if (all_tokens) {
    e.tokens = tokens;
    if (tokens > 0.0) {
      e.usd_per_million_tokens = e.energy_cost_usd / (tokens / kTokensPerMillion);
      e.carbon_kg_per_million_tokens = e.carbon_kg / (tokens / kTokensPerMillion);
    }
  }
  return result;
}

}  // namespace headroom::planning
