#include "cli/pilot_options.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "cli/numbers.h"
#include "cli/output_files.h"
#include "common/atomic_file.h"
#include "common/duration.h"
#include "common/paths.h"

namespace headroom::cli::pilot_options {

// "10%", "-50%", "2.5%": a relative effect as a fraction; the % is required.
Result<double> ParseEffect(const std::string& text) {
  if (text.empty() || text.back() != '%') {
    return Error::Usage(
        fmt::format("--effect: {} needs its unit, e.g. 10% or -30%", QuoteForMessage(text)));
  }
  auto v =
      ParseReal(std::string_view(text).substr(0, text.size() - 1), -kMaxEffectPct, kMaxEffectPct);
  if (!v) return Error::Usage(fmt::format("--effect: {}", v.error().message()));
  if (std::abs(*v) < kMinEffectPct || *v <= -100.0) {
    return Error::Usage(fmt::format("--effect: {} must be at least {}% in size and above -100%",
                                    QuoteForMessage(text), kMinEffectPct));
  }
  return *v / 100.0;
}

// A block length with its unit: ms, s, min, h, or d (days).
Result<double> ParseBlockS(const std::string& text) {
  double seconds = 0.0;
  if (!text.empty() && text.back() == 'd') {
    auto days = ParseReal(std::string_view(text).substr(0, text.size() - 1), 0.0, 365.0);
    if (!days || *days <= 0.0) {
      return Error::Usage(
          fmt::format("--block: {} is not a duration in (0, 365] days", QuoteForMessage(text)));
    }
    seconds = *days * kSecondsPerDay;
  } else {
    auto s = ParseDurationS(text, BareNumber::kRefused);
    if (!s) {
      return Error::Usage(fmt::format("--block: {}: a duration with its unit (ms, s, min, h, d)",
                                      QuoteForMessage(text)));
    }
    seconds = *s;
  }
  if (seconds < 1.0 || seconds > 365 * kSecondsPerDay) {
    return Error::Usage(fmt::format("--block: {} is not in [1s, 365d]", QuoteForMessage(text)));
  }
  return seconds;
}

Result<pilot::TraceData> ReadTrace(const std::string& path, const trace::ReadOptions& options,
                                   std::vector<std::string>& warnings) {
  trace::CollectingSink sink;
  auto summary = trace::ReadTraceFile(path, options, sink);
  if (!summary) return std::move(summary).error();
  warnings.insert(warnings.end(), summary->warnings.begin(), summary->warnings.end());
  return pilot::TraceData{path, summary->schema, std::move(sink.series())};
}

Status RefuseReportOver(const std::string& report, const std::vector<std::string>& traces,
                        const std::string& flag, const std::string& extra,
                        const std::string& extra_flag) {
  if (report.empty()) return OkStatus();
  std::vector<std::pair<std::string, std::string>> inputs;
  for (const auto& t : traces) {
    for (auto& input : TraceInputs(flag, t)) inputs.push_back(std::move(input));
  }
  if (!extra.empty()) inputs.emplace_back(extra_flag, extra);
  if (auto st = RefuseOutputOverInput(report, "--report", inputs); !st) return st;
  RemoveTempFilesOnSignals();
  return OkStatus();
}

Result<Baseline> LoadBaseline(const BaselineArgs& a) {
  Baseline b;
  auto& o = b.options;
  auto metric = pilot::ParseMetric(a.metric);
  if (!metric) return std::move(metric).error();
  o.metric = *metric;
  auto effect = ParseEffect(a.effect);
  if (!effect) return std::move(effect).error();
  o.effect_frac = *effect;
  auto block = ParseBlockS(a.block);
  if (!block) return std::move(block).error();
  o.block_s = *block;
  auto window = ParseWindowS("--window", a.window);
  if (!window) return std::move(window).error();
  o.window_s = *window;
  o.alpha = a.alpha;
  o.power = a.power;
  o.seed = a.seed;
  auto read_options = a.trace_options.ToReadOptions();
  if (!read_options) return std::move(read_options).error();

  pilot::MeasureOptions mo;
  mo.budget_w = a.budget_w;
  mo.windows_s = {o.window_s};
  std::vector<std::string> warnings;
  for (const auto& path : a.traces) {
    auto data = ReadTrace(path, *read_options, warnings);
    if (!data) return std::move(data).error();
    if (o.metric == pilot::Metric::kTokensPerMwh && !data->schema.Has(trace::Field::kTokens)) {
      return Error::Usage(fmt::format(
          "{}: --metric tokens_per_mwh needs a tokens column, and this trace has none (or use "
          "--metric energy or violations)",
          path));
    }
    if (o.metric == pilot::Metric::kViolations && !a.budget_w &&
        !data->schema.Has(trace::Field::kBudgetW)) {
      return Error::Usage(fmt::format(
          "{}: --metric violations needs a budget: give --budget-w or a trace with a budget_w "
          "column",
          path));
    }
    b.max_gpus = std::max(b.max_gpus, static_cast<uint32_t>(data->series.size()));
    auto blocks = pilot::CutIntoBlocks(*data, o.block_s, mo);
    if (!blocks) return std::move(blocks).error();
    std::vector<double> values;
    for (const auto& s : *blocks) {
      const auto v = s.Value(o.metric);
      if (!v) {
        return Error::Input(fmt::format("{}: a block of {} has no {} (no whole {} window in it)",
                                        path, FormatDurationS(o.block_s),
                                        pilot::MetricName(o.metric), FormatDurationS(o.window_s)));
      }
      values.push_back(*v);
    }
    b.blocks.traces.push_back(path);
    b.blocks.blocks.push_back(std::move(values));
  }
  PrintWarnings(warnings);
  return b;
}

}  // namespace headroom::cli::pilot_options
