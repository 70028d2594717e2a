// `headroom fleet`: a fleet composed offline of job traces, its peaks against nameplate, the
// oversubscription it can safely take, and what that is worth in money and carbon. Planning, not
// live control: the module is `planning/` so that the live site coordinator (coord/) has the
// word "fleet" to itself.
//
// Composition (docs/METRICS.md): each job is one trace, all its GPUs summed on the job's own grid
// (scope `sum`). A job is repeated COPIES times; each copy is shifted by an offset (uniform in
// [0, D), or 0) and wrapped cyclically to D, the shortest job's duration. Fleet power is the sum
// of every copy on a grid of step min(job dt) over [0, D). Trials repeat the random composition.
//
// Core logic only: no I/O, no clocks. Deterministic for a seed.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "analysis/envelope.h"
#include "analysis/sum_series.h"
#include "common/error.h"
#include "trace/reader.h"

namespace headroom::planning {

// Documented defaults (docs/METRICS.md, "Money and carbon").
inline constexpr double kDefaultCapacityCostUsdPerKwYear = 1000.0;
inline constexpr double kDefaultEnergyPriceUsdPerMwh = 80.0;  // the source paper's $0.08/kWh
inline constexpr double kDefaultCarbonGPerKwh = 250.0;        // the source paper's 0.25 kg/kWh
inline constexpr double kDefaultQuantile = 0.99;
inline constexpr double kDefaultRiskWindowS = 30.0;
inline constexpr double kDefaultMargin = 0.05;
inline constexpr uint32_t kDefaultTrials = 100;

// One job: a trace's GPUs summed on its own grid.
struct Job {
  std::string name;
  uint32_t copies = 1;
  uint32_t gpus = 0;
  double nameplate_w = 0.0;  // all its GPUs
  analysis::GridSeries series;
  std::optional<double> tokens_in_duration;  // set by Compose: tokens in its first D seconds
  std::vector<trace::CollectingSink::Series> samples;  // raw, for tokens
  bool has_tokens = false;

  double duration_s() const { return static_cast<double>(series.power_w.size()) * series.dt_s; }
};

// Builds a job from a trace's samples. `nameplate_per_gpu_w` applies to each GPU.
// Fails when the job's GPUs cannot be aligned (see analysis::SumOnGrid).
Result<Job> MakeJob(std::string name, uint32_t copies,
                    std::vector<trace::CollectingSink::Series> samples, bool has_tokens,
                    double nameplate_per_gpu_w);

enum class Offsets { kRandom, kNone };
Result<Offsets> ParseOffsets(std::string_view name);  // random|none

struct FleetOptions {
  uint64_t seed = 1;
  Offsets offsets = Offsets::kRandom;
  uint32_t trials = kDefaultTrials;
  std::vector<double> windows_s = {0.5, 30.0, 300.0};
  std::optional<double> budget_w;
  std::optional<double> budget_fraction;  // of fleet nameplate
  double quantile = kDefaultQuantile;
  double risk_window_s = kDefaultRiskWindowS;
  double margin = kDefaultMargin;
  double capacity_cost_usd_per_kw_year = kDefaultCapacityCostUsdPerKwYear;
  double energy_price_usd_per_mwh = kDefaultEnergyPriceUsdPerMwh;
  double carbon_g_per_kwh = kDefaultCarbonGPerKwh;
  // Called after each copy of each trial with the samples composed so far and in all (see
  // CompositionSamples); may be empty.
  std::function<void(uint64_t done, uint64_t total)> on_progress;
};

// The work of Compose: grid points x copies x distinct trials (1 without offsets), saturating
// at UINT64_MAX. Time is proportional to it; memory is not (one grid of fleet power).
uint64_t CompositionSamples(const std::vector<Job>& jobs, const FleetOptions& options);

struct FleetWindow {
  double window_s = 0.0;
  // None when the window is longer than the fleet's duration (no window counts).
  std::optional<double> peak_fraction_p50;
  std::optional<double> peak_fraction_p95;
  std::optional<double> peak_fraction_max;
  std::optional<double> violation_fraction;  // over all trials' windows
  std::vector<double> peak_fractions;        // one per trial, for plots
};

struct Economics {
  double freed_capacity_kw = 0.0;
  double freed_capacity_usd_per_year = 0.0;
  double energy_mwh = 0.0;
  double energy_cost_usd = 0.0;
  double carbon_kg = 0.0;
  std::optional<double> tokens;
  std::optional<double> usd_per_million_tokens;
  std::optional<double> carbon_kg_per_million_tokens;
};

struct FleetResult {
  uint32_t gpus = 0;
  double nameplate_w = 0.0;
  uint32_t trials = 0;
  double duration_s = 0.0;
  double dt_s = 0.0;
  std::optional<double> budget_w;
  std::vector<FleetWindow> windows;
  double risk_window_s = 0.0;
  double quantile = 0.0;
  double margin = 0.0;
  double risk_peak_w = 0.0;  // the quantile of the trials' largest risk-window power
  double oversubscription_factor = 0.0;
  Economics economics;
  analysis::Envelope power;  // the first trial's fleet power, for plots
};

// The oversubscription factor (docs/METRICS.md, "Fleet"): nameplate / (the risk peak -- the
// quantile over trials of each trial's largest risk-window power -- x (1 + margin)); 0 when
// nothing was drawn. `peaks_w`: one per trial. REQUIRES: peaks_w not empty.
double OversubscriptionFactor(double nameplate_w, std::vector<double> peaks_w, double quantile,
                              double margin, double* risk_peak_w = nullptr);

// Fails on option values out of range, and when the risk window is longer than the fleet's
// duration D (no window of it counts).
Result<FleetResult> Compose(std::vector<Job>& jobs, const FleetOptions& options);

}  // namespace headroom::planning
