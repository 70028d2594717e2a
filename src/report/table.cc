#include "report/table.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/duration.h"
#include "report_page/format.h"

namespace headroom::report {
namespace {

constexpr double kJoulesPerKwh = 3.6e6;

// Rows gathered for a text table and an HTML one alike.
struct TextRows {
  std::vector<std::vector<std::string>> rows;
  void AddRow(std::vector<std::string> row) { rows.push_back(std::move(row)); }
};

std::string Num(std::optional<double> v, int digits = 1) {
  return v ? fmt::format("{:.{}f}", *v, digits) : "-";
}

}  // namespace

std::string TextTable::Render() const {
  std::vector<size_t> width(header_.size(), 0);
  const auto measure = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  };
  measure(header_);
  for (const auto& row : rows_) measure(row);
  std::string out;
  const auto line = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < width.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : "";
      if (i > 0) out += "  ";
      const bool left = std::find(left_.begin(), left_.end(), i) != left_.end();
      out += left ? fmt::format("{:<{}}", cell, width[i]) : fmt::format("{:>{}}", cell, width[i]);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += '\n';
  };
  line(header_);
  std::vector<std::string> rule;
  for (size_t w : width) rule.push_back(std::string(w, '-'));
  line(rule);
  for (const auto& row : rows_) line(row);
  return out;
}

std::string SettleText(const analysis::SettleSummary& s) {
  const auto secs = [](const std::optional<double>& v) {
    return v ? fmt::format("{:.1f} s", *v) : std::string("-");
  };
  return fmt::format("p50 {}  p99 {}  max {}  ({} decrease{}, {} unsettled)", secs(s.p50_s),
                     secs(s.p99_s), secs(s.max_s), s.events, s.events == 1 ? "" : "s", s.unsettled);
}

std::string AnalyzeToText(const analysis::AnalyzeResult& r, const TraceInfo& info) {
  std::string out;
  out += fmt::format("trace      {} ({} format)\n", info.path, info.format);
  if (!info.resolution.empty()) out += fmt::format("resolution {}\n", info.resolution);
  out += fmt::format("samples    {} from {} GPU{}, {:.1f} s, dt {} s, {} gap{}\n", r.samples,
                     r.gpus, r.gpus == 1 ? "" : "s", r.duration_s, Num(r.dt_s, 4), r.gaps,
                     r.gaps == 1 ? "" : "s");
  if (r.moving_budget) {
    const analysis::MovingBudgetResult& m = *r.moving_budget;
    out += fmt::format(
        "scope      {}   budget moving ({}, {} changes: {:.1f}-{:.1f} W, mean "
        "{:.1f} W)   nameplate {} W\n",
        analysis::ScopeName(r.scope), m.source, m.changes, m.min_w, m.max_w, m.mean_w,
        Watts(r.nameplate_w));
    if (r.settle) out += fmt::format("settle     {}\n", SettleText(*r.settle));
    out += '\n';
  } else {
    out += fmt::format("scope      {}   budget {} W   nameplate {} W\n\n",
                       analysis::ScopeName(r.scope), Watts(r.budget_w), Watts(r.nameplate_w));
  }

  TextTable windows({"window", "counted", "over budget", "max window W"});
  for (const auto& w : r.windows) {
    windows.AddRow({FormatDurationS(w.window_s), std::to_string(w.windows_counted),
                    Pct(w.violation_fraction), Watts(w.max_window_power_w)});
  }
  out += windows.Render();
  out += '\n';

  TextTable summary({"metric", "value"});
  for (auto& row : AnalyzeSummaryRows(r)) summary.AddRow(std::move(row));
  out += summary.Render();
  return out;
}

std::vector<std::vector<std::string>> AnalyzeSummaryRows(const analysis::AnalyzeResult& r) {
  TextRows summary;
  summary.AddRow({"energy", fmt::format("{:.3f} kWh", r.energy_j / kJoulesPerKwh)});
  summary.AddRow({"mean power", fmt::format("{:.1f} W", r.mean_power_w)});
  summary.AddRow({"peak power", fmt::format("{:.1f} W", r.peak_power_w)});
  summary.AddRow({"peak / nameplate", Pct(r.peak_fraction_of_nameplate)});
  summary.AddRow({"max ramp (1 s windows)",
                  r.max_ramp_w_per_s ? fmt::format("{:.1f} W/s", *r.max_ramp_w_per_s) : "-"});
  summary.AddRow({"tokens", r.tokens ? Number(*r.tokens) : "-"});
  summary.AddRow({"tokens per MWh", r.tokens_per_mwh ? Number(*r.tokens_per_mwh) : "-"});
  if (r.has_spectrum) {
    summary.AddRow(
        {fmt::format("swing energy {:g}-{:g} Hz", r.spectrum.band_lo_hz, r.spectrum.band_hi_hz),
         Pct(r.spectrum.band_fraction)});
    summary.AddRow({"dominant frequency", r.spectrum.dominant_hz
                                              ? fmt::format("{:.4g} Hz", *r.spectrum.dominant_hz)
                                              : "-"});
  }
  return std::move(summary.rows);
}

std::string FleetToText(const planning::FleetResult& r, const std::vector<planning::Job>& jobs) {
  std::string out;
  TextTable job_table({"job", "copies", "GPUs", "nameplate W", "duration s"});
  for (const auto& job : jobs) {
    job_table.AddRow({job.name, std::to_string(job.copies), std::to_string(job.gpus),
                      fmt::format("{:.0f}", job.nameplate_w),
                      fmt::format("{:.1f}", job.duration_s())});
  }
  out += job_table.Render();
  out += fmt::format(
      "\nfleet      {} GPUs, nameplate {:.1f} kW, {:.1f} s composed at dt {:.4g} s, "
      "{} trial{}\n",
      r.gpus, r.nameplate_w / 1e3, r.duration_s, r.dt_s, r.trials, r.trials == 1 ? "" : "s");
  out += fmt::format("budget     {}\n\n",
                     r.budget_w ? fmt::format("{:.1f} kW", *r.budget_w / 1e3) : "-");
  TextTable windows({"window", "peak/nameplate p50", "p95", "max", "over budget"});
  for (const auto& w : r.windows) {
    windows.AddRow({FormatDurationS(w.window_s), Pct(w.peak_fraction_p50), Pct(w.peak_fraction_p95),
                    Pct(w.peak_fraction_max), Pct(w.violation_fraction)});
  }
  out += windows.Render();
  out += '\n';
  TextTable summary({"metric", "value"});
  for (auto& row : FleetSummaryRows(r)) summary.AddRow(std::move(row));
  out += summary.Render();
  return out;
}

std::vector<std::vector<std::string>> FleetSummaryRows(const planning::FleetResult& r) {
  const auto& e = r.economics;
  TextRows summary;
  summary.AddRow(
      {fmt::format("risk peak (q{:g} of {} peaks)", r.quantile, FormatDurationS(r.risk_window_s)),
       fmt::format("{:.1f} kW", r.risk_peak_w / 1e3)});
  summary.AddRow({fmt::format("oversubscription factor (margin {:g}%)", r.margin * 100.0),
                  fmt::format("{:.2f}x", r.oversubscription_factor)});
  summary.AddRow({"freed capacity", fmt::format("{:.1f} kW", e.freed_capacity_kw)});
  summary.AddRow(
      {"freed capacity value", fmt::format("${:.0f}/year", e.freed_capacity_usd_per_year)});
  summary.AddRow({"fleet energy", fmt::format("{:.4f} MWh", e.energy_mwh)});
  summary.AddRow({"energy cost", fmt::format("${:.2f}", e.energy_cost_usd)});
  summary.AddRow({"carbon", fmt::format("{:.2f} kg CO2e", e.carbon_kg)});
  summary.AddRow({"tokens", e.tokens ? Number(*e.tokens) : "-"});
  summary.AddRow({"cost per million tokens", e.usd_per_million_tokens
                                                 ? fmt::format("${:.4f}", *e.usd_per_million_tokens)
                                                 : "-"});
  summary.AddRow(
      {"carbon per million tokens", e.carbon_kg_per_million_tokens
                                        ? fmt::format("{:.4f} kg", *e.carbon_kg_per_million_tokens)
                                        : "-"});
  return std::move(summary.rows);
}

}  // namespace headroom::report
