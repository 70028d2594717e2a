#include "report/json.h"

#include "common/duration.h"

namespace headroom::report {
namespace {

template <class T>
nlohmann::ordered_json OrNull(const std::optional<T>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

}  // namespace

nlohmann::ordered_json SettleToJson(const analysis::SettleSummary& s) {
  nlohmann::ordered_json j;
  j["p50"] = OrNull(s.p50_s);
  j["p99"] = OrNull(s.p99_s);
  j["max"] = OrNull(s.max_s);
  j["events"] = s.events;
  j["unsettled"] = s.unsettled;
  return j;
}

nlohmann::ordered_json AnalyzeToJson(const analysis::AnalyzeResult& r, const TraceInfo& info) {
  nlohmann::ordered_json j;
  j["trace"] = info.path;
  j["format"] = info.format;
  if (!info.resolution.empty()) j["resolution"] = info.resolution;
  j["samples"] = r.samples;
  j["gpus"] = r.gpus;
  j["duration_s"] = r.duration_s;
  j["dt_s"] = OrNull(r.dt_s);
  j["scope"] = analysis::ScopeName(r.scope);
  j["budget_w"] = OrNull(r.budget_w);
  if (r.moving_budget) {
    const analysis::MovingBudgetResult& m = *r.moving_budget;
    j["budget_schedule"] = {{"source", m.source},
                            {"changes", m.changes},
                            {"min_w", m.min_w},
                            {"max_w", m.max_w},
                            {"mean_w", m.mean_w}};
  }
  if (r.settle) j["settle_s"] = SettleToJson(*r.settle);
  j["energy_j"] = r.energy_j;
  j["mean_power_w"] = r.mean_power_w;
  j["peak_power_w"] = r.peak_power_w;
  j["gaps"] = r.gaps;
  auto windows = nlohmann::ordered_json::array();
  for (const auto& w : r.windows) {
    nlohmann::ordered_json o;
    o["window_s"] = w.window_s;
    o["label"] = FormatDurationS(w.window_s);
    o["windows_counted"] = w.windows_counted;
    o["violation_fraction"] = OrNull(w.violation_fraction);
    o["max_window_power_w"] = OrNull(w.max_window_power_w);
    windows.push_back(std::move(o));
  }
  j["windows"] = std::move(windows);
  j["max_ramp_w_per_s"] = OrNull(r.max_ramp_w_per_s);
  j["tokens"] = OrNull(r.tokens);
  j["tokens_per_mwh"] = OrNull(r.tokens_per_mwh);
  j["nameplate_w"] = OrNull(r.nameplate_w);
  j["peak_fraction_of_nameplate"] = OrNull(r.peak_fraction_of_nameplate);
  if (r.has_spectrum) {
    nlohmann::ordered_json s;
    s["band_hz"] = {r.spectrum.band_lo_hz, r.spectrum.band_hi_hz};
    s["band_fraction"] = OrNull(r.spectrum.band_fraction);
    s["dominant_hz"] = OrNull(r.spectrum.dominant_hz);
    j["spectrum"] = std::move(s);
  } else {
    j["spectrum"] = {{"band_hz", nullptr}, {"band_fraction", nullptr}, {"dominant_hz", nullptr}};
  }
  return j;
}

nlohmann::ordered_json FleetToJson(const planning::FleetResult& r,
                                   const std::vector<planning::Job>& jobs) {
  nlohmann::ordered_json j;
  j["gpus"] = r.gpus;
  j["nameplate_w"] = r.nameplate_w;
  j["trials"] = r.trials;
  j["duration_s"] = r.duration_s;
  j["dt_s"] = r.dt_s;
  j["budget_w"] = OrNull(r.budget_w);
  auto windows = nlohmann::ordered_json::array();
  for (const auto& w : r.windows) {
    nlohmann::ordered_json o;
    o["window_s"] = w.window_s;
    o["label"] = FormatDurationS(w.window_s);
    o["peak_fraction_p50"] = OrNull(w.peak_fraction_p50);
    o["peak_fraction_p95"] = OrNull(w.peak_fraction_p95);
    o["peak_fraction_max"] = OrNull(w.peak_fraction_max);
    o["violation_fraction"] = OrNull(w.violation_fraction);
    windows.push_back(std::move(o));
  }
  j["windows"] = std::move(windows);
  j["risk_window_s"] = r.risk_window_s;
  j["quantile"] = r.quantile;
  j["margin"] = r.margin;
  j["risk_peak_w"] = r.risk_peak_w;
  j["oversubscription_factor"] = r.oversubscription_factor;
  const auto& e = r.economics;
  j["economics"] = {
      {"freed_capacity_kw", e.freed_capacity_kw},
      {"freed_capacity_usd_per_year", e.freed_capacity_usd_per_year},
      {"energy_mwh", e.energy_mwh},
      {"energy_cost_usd", e.energy_cost_usd},
      {"carbon_kg", e.carbon_kg},
      {"tokens", OrNull(e.tokens)},
      {"usd_per_million_tokens", OrNull(e.usd_per_million_tokens)},
      {"carbon_kg_per_million_tokens", OrNull(e.carbon_kg_per_million_tokens)},
  };
  auto job_list = nlohmann::ordered_json::array();
  for (const auto& job : jobs) {
    job_list.push_back({{"trace", job.name},
                        {"copies", job.copies},
                        {"gpus", job.gpus},
                        {"nameplate_w", job.nameplate_w},
                        {"duration_s", job.duration_s()},
                        {"dt_s", job.series.dt_s},
                        {"tokens_in_duration", OrNull(job.tokens_in_duration)}});
  }
  j["jobs"] = std::move(job_list);
  return j;
}

}  // namespace headroom::report
