#include "site_sim/sites_sim_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "report/table.h"
#include "report_page/format.h"
#include "report_page/html_page.h"
#include "report_page/svg.h"

namespace headroom::site_sim {

// The report library's page, tables and number formats.
using report::HtmlEscape;
using report::HtmlTable;
using report::Number;
using report::Page;
using report::SvgChart;
using report::TextTable;

namespace {

using nlohmann::json;

constexpr double kSitesJPerKwh = 3.6e6;

double ChangePct(double a, double b) { return b > 0.0 ? 100.0 * (a / b - 1.0) : 0.0; }

json RunJson(const SitesSimRun& run) {
  json sites = json::array();
  for (const auto& s : run.sites) {
    sites.push_back({{"site", s.name},
                     {"energy_kwh", s.energy_j / kSitesJPerKwh},
                     {"carbon_g", s.carbon_g},
                     {"cost_eur", s.cost_eur},
                     {"worker_hours", s.worker_s / 3600.0},
                     {"spare_kwh", s.spare_j / kSitesJPerKwh}});
  }
  return json{{"policy", run.policy},
              {"tokens", run.tokens},
              {"rounds", run.rounds},
              {"energy_kwh", run.energy_j / kSitesJPerKwh},
              {"carbon_g", run.carbon_g},
              {"carbon_g_per_mtoken", run.carbon_g_per_mtoken()},
              {"cost_eur", run.cost_eur},
              {"coordination_energy_fraction",
               run.compute_energy_j > 0.0 ? run.coordination_j / run.compute_energy_j : 0.0},
              {"wan_bytes", run.wan_bytes},
              {"lan_bytes", run.lan_bytes},
              {"moves", run.moves},
              {"idle_s", run.idle_s},
              {"sites", sites}};
}

}  // namespace

json SitesSimToJson(const SitesSimResult& r) {
  json j;
  j["duration_s"] = r.duration_s;
  j["workers"] = r.workers;
  json runs = json::array();
  for (const auto& run : r.runs) runs.push_back(RunJson(run));
  j["runs"] = runs;
  const auto* carbon = r.Find("carbon");
  const auto* spare = r.Find("spare");
  const auto* dedicated = r.Find("dedicated");
  if (carbon && spare) {
    j["carbon_per_token_vs_spare_pct"] =
        ChangePct(carbon->carbon_g_per_mtoken(), spare->carbon_g_per_mtoken());
  }
  if (carbon) {
    json singles = json::object(), tokens = json::object();
    for (const std::string& name : r.site_names) {
      if (const auto* single = r.Find("single:" + name)) {
        singles[name] = ChangePct(carbon->carbon_g_per_mtoken(), single->carbon_g_per_mtoken());
        tokens[name] = ChangePct(carbon->tokens, single->tokens);
      }
    }
    j["carbon_per_token_vs_single_pct"] = singles;
    j["tokens_vs_single_pct"] = tokens;
    if (dedicated) j["tokens_vs_dedicated_pct"] = ChangePct(carbon->tokens, dedicated->tokens);
  }
  return j;
}

std::string SitesSimToText(const SitesSimResult& r) {
  std::string out = fmt::format("sites-sim: {} workers, {:.0f} s\n\n", r.workers, r.duration_s);
  TextTable t({"placement", "tokens", "rounds", "energy kWh", "carbon kg", "g CO2 / M tokens",
               "cost EUR", "coordination", "moves", "idle h"});
  for (const auto& run : r.runs) {
    t.AddRow({run.policy, Number(run.tokens), std::to_string(run.rounds),
              fmt::format("{:.2f}", run.energy_j / kSitesJPerKwh),
              fmt::format("{:.3f}", run.carbon_g / 1000.0),
              fmt::format("{:.2f}", run.carbon_g_per_mtoken()), fmt::format("{:.2f}", run.cost_eur),
              fmt::format("{:.2f} %", run.compute_energy_j > 0.0
                                          ? 100.0 * run.coordination_j / run.compute_energy_j
                                          : 0.0),
              std::to_string(run.moves), fmt::format("{:.1f}", run.idle_s / 3600.0)});
  }
  out += t.Render();
  const json j = SitesSimToJson(r);
  if (j.contains("carbon_per_token_vs_spare_pct")) {
    out += fmt::format(
        "\ncarbon per token, carbon-aware placement: {:+.1f} % against placing by "
        "spare watts alone",
        j["carbon_per_token_vs_spare_pct"].get<double>());
    for (const auto& [name, pct] : j["carbon_per_token_vs_single_pct"].items()) {
      out += fmt::format("; {:+.1f} % against {} alone ({:+.1f} % tokens)", pct.get<double>(), name,
                         j["tokens_vs_single_pct"][name].get<double>());
    }
    out += "\n";
  }
  return out;
}

std::string SitesSimReportHtml(const SitesSimResult& r, const SitesSimConfig& config) {
  std::string body = fmt::format("<p>{} workers of one DiLoCo run, {:.0f} simulated hours.</p>",
                                 r.workers, r.duration_s / 3600.0);
  std::vector<std::vector<std::string>> rows;
  for (const auto& run : r.runs) {
    rows.push_back({HtmlEscape(run.policy), Number(run.tokens),
                    fmt::format("{:.2f}", run.energy_j / kSitesJPerKwh),
                    fmt::format("{:.3f}", run.carbon_g / 1000.0),
                    fmt::format("{:.2f}", run.carbon_g_per_mtoken()),
                    fmt::format("{:.2f}", run.cost_eur), std::to_string(run.moves)});
  }
  body += HtmlTable(
      {"placement", "tokens", "energy kWh", "carbon kg", "g CO2 / M tokens", "cost EUR", "moves"},
      rows);
  const double full_w = config.worker.threads * config.worker.watts_per_core;
  for (const auto& run : r.runs) {
    if (run.policy == "dedicated") continue;
    body += fmt::format("<h2>Placement: {}</h2>", HtmlEscape(run.policy));
    for (size_t si = 0; si < run.sites.size() && si < config.sites.size(); ++si) {
      const auto& s = run.sites[si];
      const double budget_w = config.sites[si].site_budget_w;
      const size_t n = s.power_w.size();
      std::vector<double> t(n), zero(n, 0.0), guaranteed(n), used(n), top(n), workers(n);
      for (size_t i = 0; i < n; ++i) {
        t[i] = 60.0 * static_cast<double>(i);
        guaranteed[i] = std::max(0.0, budget_w - s.spare_w[i]);
        used[i] = std::min(budget_w, guaranteed[i] + s.power_w[i]);
        top[i] = budget_w;
        workers[i] = static_cast<double>(s.workers[i]) * full_w;
      }
      double hi = budget_w;  // the axis covers every series: nothing above the frame
      for (double w : workers) hi = std::max(hi, w);
      SvgChart c({0.0, r.duration_s, false, "time (h)", 3600.0}, {0.0, hi * 1.1, false, "W", 1.0});
      c.Band(t, zero, guaranteed, "#1f77b4", "guaranteed jobs");
      c.Band(t, guaranteed, used, "#2ca02c", "opportunistic workers");
      c.Band(t, used, top, "#dddddd", "spare");
      c.Line(t, workers, "#000000", "workers placed x their full power");
      c.HorizontalRule(budget_w, "#d62728", "site budget");
      body += fmt::format("<h3>{}: {:.2f} kWh, {:.1f} worker-hours</h3>", HtmlEscape(s.name),
                          s.energy_j / kSitesJPerKwh, s.worker_s / 3600.0) +
              c.Render();
    }
  }
  // The grids' carbon intensity, one line per site.
  if (!r.runs.empty()) {
    const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"};
    double hi = 1.0;
    for (const auto& s : r.runs[0].sites) {
      for (double v : s.carbon_g_per_kwh) hi = std::max(hi, v);
    }
    SvgChart c({0.0, r.duration_s, false, "time (h)", 3600.0},
               {0.0, hi * 1.1, false, "g CO2 / kWh", 1.0});
    for (size_t si = 0; si < r.runs[0].sites.size(); ++si) {
      const auto& s = r.runs[0].sites[si];
      std::vector<double> t(s.carbon_g_per_kwh.size());
      for (size_t i = 0; i < t.size(); ++i) t[i] = 60.0 * static_cast<double>(i);
      c.Line(t, s.carbon_g_per_kwh, colors[si % 5], s.name);
    }
    body += "<h2>The sites' grid carbon intensity</h2>" + c.Render();
  }
  // The headline: the cleanest placement against placing by spare watts alone.
  const SitesSimRun* cleanest = nullptr;
  const SitesSimRun* spare = nullptr;
  for (const auto& run : r.runs) {
    if (run.policy == "spare") spare = &run;
    if (run.policy == "dedicated" || run.tokens <= 0.0) continue;
    if (cleanest == nullptr || run.carbon_g_per_mtoken() < cleanest->carbon_g_per_mtoken()) {
      cleanest = &run;
    }
  }
  std::string headline = "No placement trained any tokens.";
  if (cleanest != nullptr) {
    headline = fmt::format("Placing by {} trains {} tokens at {} g CO2 per million tokens",
                           cleanest->policy, Number(cleanest->tokens),
                           Number(cleanest->carbon_g_per_mtoken(), 2));
    if (spare != nullptr && spare != cleanest && spare->carbon_g_per_mtoken() > 0.0) {
      headline += fmt::format(
          ", {:.0f} % less carbon per token than placing by spare watts alone",
          100.0 * (1.0 - cleanest->carbon_g_per_mtoken() / spare->carbon_g_per_mtoken()));
    }
    headline += fmt::format(", over {:.0f} simulated hours on {} sites.", r.duration_s / 3600.0,
                            config.sites.size());
  }
  return Page("headroom sites-sim", HtmlEscape(headline), body);
}

}  // namespace headroom::site_sim
