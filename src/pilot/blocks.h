// A pilot's blocks measured from traces: each block's statistics are `headroom analyze`'s on
// the trace cut to the block (analysis::Analyzer, scope gpu; docs/METRICS.md), so a block's
// energy, tokens and violation fractions have the one definition of every other command.
//
// Pure: takes samples already read (trace::CollectingSink's series), does no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "trace/reader.h"
#include "trace/schema.h"

namespace headroom::pilot {

// The metric a pilot is planned on (docs/PILOT.md): tokens per MWh of a block, its violation
// fraction at one window, or its energy in MWh.
enum class Metric { kTokensPerMwh, kViolations, kEnergy };
Result<Metric> ParseMetric(std::string_view name);  // tokens_per_mwh|violations|energy
std::string_view MetricName(Metric metric);

// Violations are judged at these windows (docs/METRICS.md's defaults).
inline const std::vector<double> kReportWindowsS = {0.5, 30.0, 300.0};

struct MeasureOptions {
  std::optional<double> budget_w;  // per GPU; without it, a trace's budget_w column if it has one
  std::vector<double> windows_s = kReportWindowsS;
};

// What one stretch of one trace holds; sums over stretches (Add) pool as scope gpu pools GPUs.
struct BlockStats {
  double duration_s = 0.0;  // the stretch's length
  double energy_j = 0.0;
  std::optional<double> tokens;           // none without a tokens column
  bool has_budget = false;                // windows were scored against a budget
  std::vector<uint64_t> windows_counted;  // per MeasureOptions::windows_s
  std::vector<uint64_t> windows_over;

  void Add(const BlockStats& other);
  double EnergyMwh() const;
  std::optional<double> TokensPerMwh() const;
  // REQUIRES: window < windows_counted.size().
  std::optional<double> ViolationFraction(size_t window) const;
  // The value of `metric` (violations at window 0). nullopt when it is not defined here.
  std::optional<double> Value(Metric metric) const;
};

// A trace as read: its per-GPU series and its schema.
struct TraceData {
  std::string name;  // for messages
  trace::TraceSchema schema;
  std::vector<trace::CollectingSink::Series> series;
};

// The trace's first time (the earliest over GPUs) and last time (the latest).
struct TraceSpan {
  double first_s = 0.0, last_s = 0.0, dt_s = 0.0;  // dt: median step of the first GPU
};
Result<TraceSpan> SpanOf(const TraceData& trace);

// The statistics of the samples with from_s <= t_s < to_s. Fails (one line, naming the trace)
// when the stretch holds no sample or the Analyzer refuses it.
Result<BlockStats> MeasureStretch(const TraceData& trace, double from_s, double to_s,
                                  const MeasureOptions& options);

// The trace cut into consecutive blocks of block_s from its first time; only whole blocks
// (end <= last time + dt) are kept. Blocks without samples (inside a gap) are left out.
// REQUIRES: block_s > 0.
Result<std::vector<BlockStats>> CutIntoBlocks(const TraceData& trace, double block_s,
                                              const MeasureOptions& options);

}  // namespace headroom::pilot
