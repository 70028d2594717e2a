#include "pilot/blocks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "analysis/analyzer.h"
#include "analysis/step_stats.h"
#include "common/stats.h"

namespace headroom::pilot {

Result<Metric> ParseMetric(std::string_view name) {
  if (name == "tokens_per_mwh") return Metric::kTokensPerMwh;
  if (name == "violations") return Metric::kViolations;
  if (name == "energy") return Metric::kEnergy;
  return Error::Usage(fmt::format("--metric: '{}' is not one of tokens_per_mwh, violations, energy",
                                  name.substr(0, 40)));
}

std::string_view MetricName(Metric metric) {
  switch (metric) {
    case Metric::kTokensPerMwh:
      return "tokens_per_mwh";
    case Metric::kViolations:
      return "violations";
    case Metric::kEnergy:
      return "energy";
  }
  return "?";
}

void BlockStats::Add(const BlockStats& other) {
  duration_s = std::max(duration_s, other.duration_s);
  energy_j += other.energy_j;
  if (other.tokens) tokens = tokens.value_or(0.0) + *other.tokens;
  has_budget = has_budget || other.has_budget;
  if (windows_counted.size() < other.windows_counted.size()) {
    windows_counted.resize(other.windows_counted.size(), 0);
    windows_over.resize(other.windows_over.size(), 0);
  }
  for (size_t i = 0; i < other.windows_counted.size(); ++i) {
    windows_counted[i] += other.windows_counted[i];
    windows_over[i] += other.windows_over[i];
  }
}

double BlockStats::EnergyMwh() const { return energy_j / analysis::kJoulesPerMegawattHour; }

std::optional<double> BlockStats::TokensPerMwh() const {
  if (!tokens || !(energy_j > 0.0)) return std::nullopt;
  return *tokens / EnergyMwh();
}

std::optional<double> BlockStats::ViolationFraction(size_t window) const {
  if (!has_budget || windows_counted[window] == 0) return std::nullopt;
  return static_cast<double>(windows_over[window]) / static_cast<double>(windows_counted[window]);
}

std::optional<double> BlockStats::Value(Metric metric) const {
  switch (metric) {
    case Metric::kTokensPerMwh:
      return TokensPerMwh();
    case Metric::kViolations:
      return windows_counted.empty() ? std::nullopt : ViolationFraction(0);
    case Metric::kEnergy:
      return EnergyMwh();
  }
  return std::nullopt;
}

Result<TraceSpan> SpanOf(const TraceData& trace) {
  TraceSpan span;
  span.first_s = std::numeric_limits<double>::infinity();
  span.last_s = -std::numeric_limits<double>::infinity();
  for (const auto& s : trace.series) {
    if (s.t_s.empty()) continue;
    span.first_s = std::min(span.first_s, s.t_s.front());
    span.last_s = std::max(span.last_s, s.t_s.back());
  }
  if (!(span.last_s >= span.first_s))
    return Error::Input(fmt::format("{}: no samples", trace.name));
  // The step as analyze and fleet take it: the median over every GPU's steps.
  analysis::StepStats steps;
  for (const auto& s : trace.series) {
    for (size_t i = 1; i < s.t_s.size(); ++i) steps.Add(s.t_s[i] - s.t_s[i - 1], 0.0);
  }
  const auto summary = steps.Finish();
  if (summary.dt_s) {
    const auto dt_s = analysis::TraceStep(summary);
    if (!dt_s) return Error::Input(fmt::format("{}: {}", trace.name, dt_s.error().message()));
    span.dt_s = *dt_s;
  }
  return span;
}

Result<BlockStats> MeasureStretch(const TraceData& trace, double from_s, double to_s,
                                  const MeasureOptions& options) {
  analysis::AnalyzeOptions ao;
  ao.scope = analysis::Scope::kGpu;
  ao.windows_s = options.windows_s;
  ao.budget_w = options.budget_w;
  // Only what the block statistics need travels: tokens and budgets.
  trace::TraceSchema schema;
  schema.format = trace.schema.format;
  schema.gpu_ids = trace.schema.gpu_ids;
  const bool tokens = trace.schema.Has(trace::Field::kTokens);
  const bool budgets = trace.schema.Has(trace::Field::kBudgetW);
  if (tokens) schema.has_field.set(trace::FieldIndex(trace::Field::kTokens));
  if (budgets) schema.has_field.set(trace::FieldIndex(trace::Field::kBudgetW));

  // The stretch's samples in time order, GPUs in index order within a time: whole polls when
  // the GPUs share their times (the Analyzer's fast path), correct either way.
  struct Ref {
    double t_s;
    uint32_t gpu;
    size_t i;
  };
  std::vector<Ref> refs;
  for (size_t g = 0; g < trace.series.size(); ++g) {
    const auto& t = trace.series[g].t_s;
    const auto lo = std::lower_bound(t.begin(), t.end(), from_s);
    const auto hi = std::lower_bound(lo, t.end(), to_s);
    for (auto it = lo; it != hi; ++it) {
      refs.push_back({*it, static_cast<uint32_t>(g), static_cast<size_t>(it - t.begin())});
    }
  }
  if (refs.empty()) {
    return Error::Input(fmt::format("{}: no samples in [{}, {}) s", trace.name, from_s, to_s));
  }
  std::stable_sort(refs.begin(), refs.end(), [](const Ref& a, const Ref& b) {
    return std::tie(a.t_s, a.gpu) < std::tie(b.t_s, b.gpu);
  });

  analysis::Analyzer analyzer(ao);
  constexpr size_t kBatchRows = 4032;  // as trace::ReadOptions::batch_rows
  trace::SampleBatch batch;
  batch.Reserve(kBatchRows, schema);
  auto& tok = batch.fields[trace::FieldIndex(trace::Field::kTokens)];
  auto& bud = batch.fields[trace::FieldIndex(trace::Field::kBudgetW)];
  for (size_t start = 0; start < refs.size(); start += kBatchRows) {
    const size_t n = std::min(kBatchRows, refs.size() - start);
    for (size_t j = 0; j < n; ++j) {
      const Ref& r = refs[start + j];
      const auto& s = trace.series[r.gpu];
      batch.gpu[j] = r.gpu;
      batch.t_s[j] = r.t_s;
      batch.power_w[j] = s.power_w[r.i];
      if (tokens) tok[j] = s.tokens[r.i];
      if (budgets) bud[j] = s.budget_w[r.i];
    }
    batch.count = n;
    analyzer.OnBatch(batch, schema);
  }
  auto result = analyzer.Finish(schema);
  if (!result) {
    return Error::Input(
        fmt::format("{}: [{}, {}) s: {}", trace.name, from_s, to_s, result.error().message()));
  }
  BlockStats b;
  b.duration_s = std::isfinite(to_s - from_s) ? to_s - from_s : result->duration_s;
  b.energy_j = result->energy_j;
  b.tokens = result->tokens;
  b.has_budget = result->budget_w.has_value() || result->moving_budget.has_value();
  for (const auto& w : result->windows) {
    b.windows_counted.push_back(w.windows_counted);
    b.windows_over.push_back(w.windows_over_budget);
  }
  return b;
}

Result<std::vector<BlockStats>> CutIntoBlocks(const TraceData& trace, double block_s,
                                              const MeasureOptions& options) {
  auto span = SpanOf(trace);
  if (!span) return std::move(span).error();
  std::vector<BlockStats> blocks;
  for (int64_t k = 0;; ++k) {
    const double from_s = span->first_s + static_cast<double>(k) * block_s;
    const double to_s = span->first_s + static_cast<double>(k + 1) * block_s;
    // A whole block ends at most one step after the last sample (as a counted window).
    if (to_s > span->last_s + span->dt_s + 1e-9 * block_s) break;
    bool any = false;
    for (const auto& s : trace.series) {
      const auto it = std::lower_bound(s.t_s.begin(), s.t_s.end(), from_s);
      if (it != s.t_s.end() && *it < to_s) any = true;
    }
    if (!any) continue;
    auto b = MeasureStretch(trace, from_s, to_s, options);
    if (!b) return std::move(b).error();
    blocks.push_back(std::move(b).value());
  }
  return blocks;
}

}  // namespace headroom::pilot
