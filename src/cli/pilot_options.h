// What `headroom pilot plan`, `report` and `validate` share (docs/PILOT.md): option bounds and
// parsers, trace reading, and the baseline (the traces cut into blocks) that plan and validate
// stand on.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/numbers.h"
#include "cli/trace_options.h"
#include "common/error.h"
#include "pilot/blocks.h"
#include "pilot/design.h"
#include "report/pilot_report.h"
#include "trace/reader.h"

namespace headroom::cli::pilot_options {

// Option bounds (docs/PILOT.md).
inline constexpr double kMinAlpha = 1e-4;
inline constexpr double kMaxAlpha = 0.5;
inline constexpr double kMinPower = 0.5;
inline constexpr double kMaxPower = 0.9999;
inline constexpr double kMinEffectPct = 0.01;
inline constexpr double kMaxEffectPct = 1000.0;
inline constexpr double kMaxUsdPerGpuHour = 1e4;
inline constexpr int64_t kMaxResamples = 1000000;
inline constexpr int64_t kMaxPilots = 100000;
inline constexpr int64_t kMaxPilotGpus = 10000000;
inline constexpr uint64_t kMaxBlocksFileBytes = 64ull << 20;
inline constexpr double kSecondsPerDay = 86400.0;

// "10%", "-50%", "2.5%": a relative effect as a fraction; the % is required.
Result<double> ParseEffect(const std::string& text);
// A block length with its unit: ms, s, min, h, or d (days).
Result<double> ParseBlockS(const std::string& text);
// A trace's series; its reader's warnings appended to `warnings`.
Result<pilot::TraceData> ReadTrace(const std::string& path, const trace::ReadOptions& options,
                                   std::vector<std::string>& warnings);
// Refuses a --report over any input (the traces, their sidecars, `extra`).
Status RefuseReportOver(const std::string& report, const std::vector<std::string>& traces,
                        const std::string& flag, const std::string& extra = "",
                        const std::string& extra_flag = "");

// What plan and validate share: the baseline and how it is cut.
struct BaselineArgs {
  std::vector<std::string> traces;
  std::string effect;
  std::string metric = "tokens_per_mwh";
  std::string block = "1d";
  std::string window = "0.5s";
  std::optional<double> budget_w;
  double alpha = 0.05;
  double power = 0.8;
  uint64_t seed = 1;
  TraceOptions trace_options;

  void Register(CLI::App& app) {
    app.add_option("--baseline", traces,
                   "Baseline traces (uncontrolled operation), each cut into blocks")
        ->required();
    app.add_option("--effect", effect, "Relative effect to detect, with %, e.g. 10% or -30%")
        ->required();
    app.add_option("--metric", metric, "tokens_per_mwh, violations or energy")
        ->capture_default_str();
    app.add_option("--block", block, "Block length with its unit (s, min, h, d), in [1s, 365d]")
        ->capture_default_str();
    app.add_option("--window", window, "violations: the window length, with its unit")
        ->capture_default_str();
    app.add_option("--budget-w", budget_w,
                   "violations: budget of one GPU in W (else the traces' budget_w column)")
        ->check(Real(kMinGpuPowerW, kMaxGpuPowerW));
    app.add_option("--alpha", alpha, "Significance level, two-sided")
        ->check(Real(kMinAlpha, kMaxAlpha))
        ->capture_default_str();
    app.add_option("--power", power, "Power to detect the effect")
        ->check(Real(kMinPower, kMaxPower))
        ->capture_default_str();
    app.add_option("--seed", seed, "Seed of the random choices")
        ->check(Integer(0, kMaxSeed))
        ->capture_default_str();
    trace_options.Register(app);
  }
};

struct Baseline {
  pilot::PlanOptions options;
  report::PilotBaseline blocks;
  uint32_t max_gpus = 0;
};

// The traces read and cut into blocks of the metric.
Result<Baseline> LoadBaseline(const BaselineArgs& a);

}  // namespace headroom::cli::pilot_options
