#include "site_sim/fleet_sim_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "analysis/budget_schedule.h"
#include "common/phase.h"
#include "common/stats.h"
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

json ByWindow(const std::array<double, 3>& v) {
  json j = json::object();
  for (size_t w = 0; w < 3; ++w) j[kFleetWindowNames[w]] = v[w];
  return j;
}

double Pct(double a, double b) { return b > 0.0 ? 100.0 * (a / b - 1.0) : 0.0; }

// The site's energy (jobs and opportunistic workers) / (site budget x duration).
double EnergyUseFraction(const FleetSimResult& r, const FleetSimRun& run) {
  const double budget_j = r.site_budget_w * r.duration_s;
  return budget_j > 0.0 ? (run.energy_j + run.opportunistic.energy_j) / budget_j : 0.0;
}

struct ShrinkSummary {
  std::optional<double> p50_s, p99_s, max_s;
};
ShrinkSummary SummarizeShrink(std::vector<double> v) {
  ShrinkSummary s;
  if (v.empty()) return s;
  s.p50_s = Quantile(v, 0.5);
  s.p99_s = Quantile(v, 0.99);
  s.max_s = *std::max_element(v.begin(), v.end());
  return s;
}

double CoordinationFraction(const OpportunisticRun& o) {
  return o.compute_energy_j > 0.0 ? o.coordination_j() / o.compute_energy_j : 0.0;
}

const char* kJobColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                            "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

// Colours of the phases on the timeline (common/phase.h order); a hold is idle, in black.
const char* kPhaseColors[] = {"#000000", "#bbbbbb", "#2ca02c", "#1f77b4",
                              "#d62728", "#9467bd", "#8c564b", "#ffffff"};

// A phase's name on the timeline: idle is a hold there.
std::string PhaseLabel(size_t phase) {
  return phase == 0 ? std::string("idle (held)") : std::string(kPhaseNames[phase]);
}

// Each job's phases against time, one row per job, runs of a phase merged into one rectangle.
std::string PhaseTimeline(const FleetSimRun& run, double duration_s) {
  constexpr double kLeft = 170.0, kRight = 20.0, kRow = 18.0, kGap = 4.0, kTop = 8.0;
  const double width = 860.0;
  const size_t rows = run.phase.size();
  const double height = kTop + static_cast<double>(rows) * (kRow + kGap) + 52.0;
  const auto x = [&](double t) {
    return kLeft + (duration_s > 0.0 ? t / duration_s : 0.0) * (width - kLeft - kRight);
  };
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {:.0f} {:.0f}\" width=\"100%\" "
      "class=\"timeline nochart\">",
      width, height);
  for (size_t j = 0; j < rows; ++j) {
    const double y = kTop + static_cast<double>(j) * (kRow + kGap);
    const std::string name = j < run.jobs.size() ? run.jobs[j].job : std::string("job");
    svg += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"end\">{}</text>",
        kLeft - 6.0, y + kRow - 5.0, HtmlEscape(name));
    const auto& ph = run.phase[j];
    for (size_t i = 0; i < ph.size();) {
      size_t k = i;
      while (k + 1 < ph.size() && ph[k + 1] == ph[i]) ++k;
      // Sample i stands for the second that ends at t_s[i].
      const double t0 = i < run.t_s.size() ? run.t_s[i] - 1.0 : 0.0;
      const double t1 = k < run.t_s.size() ? run.t_s[k] : duration_s;
      const size_t p = std::min<size_t>(ph[i], kPhaseCount - 1);
      svg += fmt::format(
          "<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.0f}\" "
          "fill=\"{}\"><title>{} {}: {:.0f}-{:.0f} s</title></rect>",
          x(std::max(0.0, t0)), y, std::max(0.5, x(t1) - x(std::max(0.0, t0))), kRow,
          kPhaseColors[p], HtmlEscape(name), PhaseLabel(p), t0, t1);
      i = k + 1;
    }
  }
  // The legend.
  double lx = kLeft;
  const double ly = kTop + static_cast<double>(rows) * (kRow + kGap) + 14.0;
  for (size_t p = 0; p + 1 < static_cast<size_t>(kPhaseCount); ++p) {
    const std::string label = PhaseLabel(p);
    svg += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"{}\" "
        "stroke=\"#888\"/><text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\">{}</text>",
        lx, ly, kPhaseColors[p], lx + 16.0, ly + 10.0, label);
    lx += 30.0 + 7.0 * static_cast<double>(label.size());
  }
  svg +=
      fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\">0 to {:.0f} min</text></svg>",
                  kLeft, ly + 28.0, duration_s / 60.0);
  return svg;
}

// Each job of a run: what it made, drew and was granted, and what steered it.
json JobsJson(const FleetSimRun& run) {
  json jobs = json::array();
  for (const auto& job : run.jobs) {
    jobs.push_back({{"job", job.job},
                    {"scenario", job.scenario},
                    {"gpus", job.gpus},
                    {"tokens", job.tokens},
                    {"energy_j", job.energy_j},
                    {"mean_grant_w", job.mean_grant_w},
                    {"floor_w", job.floor_w},
                    {"admitted", job.admitted},
                    {"controller", job.controller},
                    {"policy", job.policy.empty() ? json(nullptr) : json(job.policy)},
                    {"controller_note", job.controller_note}});
  }
  return jobs;
}

// A reference run in brief: its tokens, energy, windows and jobs.
json RunSummaryJson(const FleetSimRun& run) {
  json per_job = json::array();
  for (const auto& job : run.jobs) {
    per_job.push_back({{"job", job.job}, {"tokens", job.tokens}, {"energy_j", job.energy_j}});
  }
  return json{{"tokens", run.tokens},
              {"energy_j", run.energy_j},
              {"violation_fraction", ByWindow(run.violation_fraction)},
              {"peak_fraction_of_nameplate", ByWindow(run.peak_fraction_of_nameplate)},
              {"oversubscription_factor", run.oversubscription_factor},
              {"jobs", per_job}};
}

// The opportunistic workers' figures, and the site without them.
void AddOpportunisticJson(const FleetSimResult& r, json* j) {
  const OpportunisticRun& o = r.site.opportunistic;
  const auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  const ShrinkSummary sh = SummarizeShrink(o.shrink_s);
  (*j)["guaranteed_tokens_vs_alone_pct"] = Pct(r.site.tokens, r.alone.tokens);
  (*j)["opportunistic_energy_j"] = o.energy_j;
  (*j)["coordination_energy_fraction"] = CoordinationFraction(o);
  (*j)["shrink_s"] = {{"p50", opt(sh.p50_s)},
                      {"p99", opt(sh.p99_s)},
                      {"max", opt(sh.max_s)},
                      {"events", o.shrink_s.size()}};
  (*j)["opportunistic"] = {
      {"workers", o.workers},
      {"tokens", o.tokens},
      {"rounds", o.rounds},
      {"energy_j", o.energy_j},
      {"compute_energy_j", o.compute_energy_j},
      {"coordination_j", {{"membership", o.membership_j}, {"exchange", o.exchange_j}}},
      {"store_requests", o.store_requests},
      {"bytes_sent", o.bytes_sent},
      {"resyncs", o.resyncs},
      {"worker_s_paused", o.worker_s_paused},
      {"worker_s_waiting", o.worker_s_waiting}};
  (*j)["alone"] = RunSummaryJson(r.alone);
  (*j)["alone"]["energy_use_fraction"] = EnergyUseFraction(r, r.alone);
}

}  // namespace

json FleetSimToJson(const FleetSimResult& r, uint64_t seed) {
  json j;
  j["store"] = r.store;
  j["allocation"] = r.allocation;
  j["fairness"] = r.fairness;
  j["offsets"] = r.offsets;
  j["job_control"] = r.job_control;
  j["guard_power_limit"] = r.guard_power_limit;
  j["stagger"] = r.stagger;
  j["max_hold_s"] = r.max_hold_s;
  j["seed"] = seed;
  j["site_budget_w"] = r.site_budget_w;
  j["reserve_w"] = r.reserve_w;
  j["nameplate_w"] = r.nameplate_w;
  j["duration_s"] = r.duration_s;
  j["tokens"] = r.site.tokens;
  j["energy_j"] = r.site.energy_j;
  j["violation_fraction"] = ByWindow(r.site.violation_fraction);
  j["peak_fraction_of_nameplate"] = ByWindow(r.site.peak_fraction_of_nameplate);
  j["oversubscription_factor"] = r.site.oversubscription_factor;
  {
    const analysis::SettleSummary ss = analysis::SummarizeSettle(r.site.settle_s, r.site.unsettled);
    const auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
    j["settle_s"] = {{"p50", opt(ss.p50_s)},      {"p99", opt(ss.p99_s)},
                     {"max", opt(ss.max_s)},      {"events", ss.events},
                     {"values", r.site.settle_s}, {"unsettled", ss.unsettled}};
    if (r.scheduled) {
      j["tokens_without_schedule"] = r.tokens_unscheduled;
      j["tokens_lost_per_event"] = r.decreases > 0 ? (r.tokens_unscheduled - r.site.tokens) /
                                                         static_cast<double>(r.decreases)
                                                   : 0.0;
      j["schedule_tokens_cost_pct"] = -Pct(r.site.tokens, r.tokens_unscheduled);
    }
  }
  j["holds"] = {{"count", r.site.hold_count},
                {"total_s", r.site.hold_total_s},
                {"tokens_cost_pct", r.site.hold_tokens_cost_pct}};
  j["reassignments"] = r.reassignments;
  j["ledger_writes"] = r.ledger_writes;
  j["jobs"] = JobsJson(r.site);
  j["energy_use_fraction"] = EnergyUseFraction(r, r.site);
  if (r.opportunistic) AddOpportunisticJson(r, &j);
  j["without_site_budget"] = RunSummaryJson(r.baseline);
  j["own_budgets"] = RunSummaryJson(r.own_budgets);
  j["tokens_vs_without_site_budget_pct"] = Pct(r.site.tokens, r.baseline.tokens);
  j["tokens_vs_own_budgets_pct"] = Pct(r.site.tokens, r.own_budgets.tokens);
  return j;
}

namespace {
// "ppo (policies/a100-7b-tp1.json)", "pid: no policy for this scenario in DIR", "pid".
std::string ControllerText(const FleetSimJobResult& j) {
  if (!j.policy.empty()) return fmt::format("{} ({})", j.controller, j.policy);
  if (!j.controller_note.empty()) return fmt::format("{}: {}", j.controller, j.controller_note);
  return j.controller;
}
}  // namespace

std::string FleetSimToText(const FleetSimResult& r) {
  std::string out = fmt::format(
      "fleet-sim: {} jobs, {:.0f} W nameplate, site budget {:.0f} W ({:.1f} % of nameplate), "
      "reserve {:.0f} W, {:.0f} s, store {}, allocation {} (fairness {}), offsets {}, job "
      "control {}{}\n\n",
      r.site.jobs.size(), r.nameplate_w, r.site_budget_w, 100.0 * r.site_budget_w / r.nameplate_w,
      r.reserve_w, r.duration_s, r.store, r.allocation, r.fairness, r.offsets,
      r.job_control ? "on" : "off", r.guard_power_limit ? " (power limit guard)" : "");
  TextTable t(
      {"", "tokens", "energy MJ", "over 0.5s", "over 30s", "over 5min", "peak 30s", "oversub q99"});
  const auto label = [&](const FleetSimRun* run) {
    return run == &r.site       ? std::string("site budget")
           : run == &r.baseline ? std::string("no budget at all")
                                : std::string("each on its own budget");
  };
  for (const auto* run : {&r.site, &r.baseline, &r.own_budgets}) {
    t.AddRow({label(run), Number(run->tokens), fmt::format("{:.2f}", run->energy_j / 1e6),
              fmt::format("{:.2f} %", 100.0 * run->violation_fraction[0]),
              fmt::format("{:.2f} %", 100.0 * run->violation_fraction[1]),
              fmt::format("{:.2f} %", 100.0 * run->violation_fraction[2]),
              fmt::format("{:.1f} %", 100.0 * run->peak_fraction_of_nameplate[1]),
              fmt::format("{:.2f}x", run->oversubscription_factor)});
  }
  out += t.Render();
  out += fmt::format(
      "\ntokens {:+.1f} % against the same jobs with no budget, {:+.1f} % against each on its own "
      "budget; {} grants raised, {} ledger writes; stagger {}: {} holds, {:.0f} s, {:.2f} % of "
      "the tokens\n\n",
      Pct(r.site.tokens, r.baseline.tokens), Pct(r.site.tokens, r.own_budgets.tokens),
      r.reassignments, r.ledger_writes, r.stagger, r.site.hold_count, r.site.hold_total_s,
      r.site.hold_tokens_cost_pct);
  TextTable jobs({"job", "controller", "GPUs", "floor W", "mean grant W", "tokens", "no budget",
                  "own budget"});
  for (size_t i = 0; i < r.site.jobs.size(); ++i) {
    const auto& j = r.site.jobs[i];
    const double free = i < r.baseline.jobs.size() ? r.baseline.jobs[i].tokens : 0.0;
    const double own = i < r.own_budgets.jobs.size() ? r.own_budgets.jobs[i].tokens : 0.0;
    jobs.AddRow({j.job + (j.admitted ? "" : " (not admitted)"), ControllerText(j),
                 std::to_string(j.gpus), fmt::format("{:.0f}", j.floor_w),
                 fmt::format("{:.0f}", j.mean_grant_w), Number(j.tokens), Number(free),
                 Number(own)});
  }
  out += jobs.Render();
  if (r.opportunistic) {
    const OpportunisticRun& o = r.site.opportunistic;
    const ShrinkSummary sh = SummarizeShrink(o.shrink_s);
    out += fmt::format(
        "\n{} opportunistic DiLoCo workers: {:.4g} tokens in {} rounds, {:.2f} MJ ({:.1f} % "
        "coordination: {:.0f} J membership, {:.0f} J exchange); site energy {:.1f} % of budget x "
        "time ({:.1f} % without them); the jobs' tokens {:+.2f} % against the site without them; "
        "grants met {} times, p50 {:.2f} s, p99 {:.2f} s\n",
        o.workers, o.tokens, o.rounds, o.energy_j / 1e6, 100.0 * CoordinationFraction(o),
        o.membership_j, o.exchange_j, 100.0 * EnergyUseFraction(r, r.site),
        100.0 * EnergyUseFraction(r, r.alone), Pct(r.site.tokens, r.alone.tokens),
        o.shrink_s.size(), sh.p50_s.value_or(0.0), sh.p99_s.value_or(0.0));
  }
  return out;
}

namespace {

// The three runs side by side, and each job with what steered it.
std::string SummaryTables(const FleetSimResult& r) {
  std::vector<std::vector<std::string>> rows;
  for (const auto* run : {&r.site, &r.baseline, &r.own_budgets}) {
    rows.push_back({run == &r.site       ? "site budget"
                    : run == &r.baseline ? "no budget at all (the trainers' own settings)"
                                         : "each job on its own scenario budget",
                    Number(run->tokens), fmt::format("{:.2f}", run->energy_j / 1e6),
                    fmt::format("{:.2f} %", 100.0 * run->violation_fraction[0]),
                    fmt::format("{:.2f} %", 100.0 * run->violation_fraction[1]),
                    fmt::format("{:.2f} %", 100.0 * run->violation_fraction[2]),
                    fmt::format("{:.1f} %", 100.0 * run->peak_fraction_of_nameplate[1])});
  }
  std::string html = HtmlTable({"", "tokens", "energy MJ", "windows over 0.5 s", "over 30 s",
                                "over 5 min", "peak 30 s / nameplate"},
                               rows);
  std::vector<std::vector<std::string>> job_rows;
  for (const auto& j : r.site.jobs) {
    job_rows.push_back({j.job + (j.admitted ? "" : " (not admitted)"), ControllerText(j),
                        std::to_string(j.gpus), fmt::format("{:.0f}", j.floor_w),
                        fmt::format("{:.0f}", j.mean_grant_w), Number(j.tokens)});
  }
  return html + "<h2>The jobs and what steered each</h2>" +
         HtmlTable({"job", "controller", "GPUs", "floor W", "mean grant W", "tokens"}, job_rows);
}

// A run's site power against its budget; `grants`: its grants stacked under it (a run with no
// site has none to show).
std::string PowerChart(const FleetSimResult& r, const FleetSimRun& run, const std::string& title,
                       bool grants) {
  double hi = r.site_budget_w;
  for (double p : run.site_power_w) hi = std::max(hi, p);
  for (double b : run.budget_w) hi = std::max(hi, b);
  // The axis covers the stacked grants too: nothing is drawn above the frame.
  std::vector<double> stacked(run.t_s.size(), 0.0);
  for (size_t j = 0; grants && j < run.grant_w.size(); ++j) {
    for (size_t i = 0; i < stacked.size() && i < run.grant_w[j].size(); ++i) {
      stacked[i] += run.grant_w[j][i];
      hi = std::max(hi, stacked[i]);
    }
  }
  SvgChart c({0.0, r.duration_s, false, "time (min)", 60.0}, {0.0, hi * 1.1, false, "W", 1.0});
  // The grants, stacked.
  std::vector<double> base(run.t_s.size(), 0.0);
  for (size_t j = 0; grants && j < run.grant_w.size(); ++j) {
    std::vector<double> top = base;
    for (size_t i = 0; i < top.size() && i < run.grant_w[j].size(); ++i)
      top[i] += run.grant_w[j][i];
    c.Band(run.t_s, base, top, kJobColors[j % 10],
           j < run.jobs.size() ? run.jobs[j].job : std::string("job"));
    base = std::move(top);
  }
  c.Line(run.t_s, run.site_power_w, "#000000", "site power (1 s)");
  if (r.scheduled && run.budget_w.size() == run.t_s.size()) {
    c.Line(run.t_s, run.budget_w, "#d62728", "site budget of the moment");
  } else {
    c.HorizontalRule(r.site_budget_w, "#d62728", "site budget");
  }
  return fmt::format("<h2>{}</h2>{}", HtmlEscape(title), c.Render());
}

// The opportunistic workers: the site's energy with and without them, its power by class, where
// they trained.
std::string SpareSection(const FleetSimResult& r) {
  const FleetSimRun& run = r.site;
  const OpportunisticRun& o = run.opportunistic;
  const ShrinkSummary sh = SummarizeShrink(o.shrink_s);
  std::string body = fmt::format(
      "<h2>Spare power: {} opportunistic DiLoCo workers</h2><p>Site energy <b>{:.1f} %</b> of "
      "budget × time ({:.1f} % without the workers); the jobs' tokens <b>{:+.2f} %</b> against "
      "the site without them; the workers' {:.2f} MJ trained {} tokens in {} rounds, "
      "coordination {:.2f} % of their compute energy; shrinking grants met {} times, p50 "
      "{:.2f} s, p99 {:.2f} s.</p>",
      o.workers, 100.0 * EnergyUseFraction(r, run), 100.0 * EnergyUseFraction(r, r.alone),
      Pct(run.tokens, r.alone.tokens), o.energy_j / 1e6, Number(o.tokens), o.rounds,
      100.0 * CoordinationFraction(o), o.shrink_s.size(), sh.p50_s.value_or(0.0),
      sh.p99_s.value_or(0.0));
  double hi = r.site_budget_w;
  for (double p : run.site_power_w) hi = std::max(hi, p);
  SvgChart c({0.0, r.duration_s, false, "time (min)", 60.0}, {0.0, hi * 1.1, false, "W", 1.0});
  const size_t n = std::min(run.t_s.size(), o.power_w.size());
  std::vector<double> t(run.t_s.begin(), run.t_s.begin() + static_cast<std::ptrdiff_t>(n));
  std::vector<double> zero(n, 0.0), guaranteed(n), total(n), budget(n);
  for (size_t i = 0; i < n; ++i) {
    guaranteed[i] = std::max(0.0, run.site_power_w[i] - o.power_w[i]);
    total[i] = run.site_power_w[i];
    const double b = i < run.budget_w.size() ? run.budget_w[i] : r.site_budget_w;
    budget[i] = std::max(total[i], b);
  }
  c.Band(t, zero, guaranteed, "#1f77b4", "guaranteed jobs");
  c.Band(t, guaranteed, total, "#2ca02c", "opportunistic workers");
  c.Band(t, total, budget, "#dddddd", "spare (budget not drawn)");
  c.HorizontalRule(r.site_budget_w, "#d62728", "site budget");
  body += c.Render();
  std::vector<double> training(n);
  for (size_t i = 0; i < n && i < o.training.size(); ++i) training[i] = o.training[i];
  SvgChart w({0.0, r.duration_s, false, "time (min)", 60.0},
             {0.0, std::max(1.0, static_cast<double>(o.workers)) * 1.1, false, "workers", 1.0});
  w.Line(t, training, "#2ca02c", "workers training (drawing power), at the site");
  body += "<h2>Where the workers were</h2>" + w.Render();
  return body;
}

// Each job's tokens under the site, with no budget and on its own budget.
std::string JobsTable(const FleetSimResult& r) {
  std::vector<std::vector<std::string>> jobs;
  for (size_t i = 0; i < r.site.jobs.size(); ++i) {
    const auto& j = r.site.jobs[i];
    jobs.push_back({HtmlEscape(j.job), std::to_string(j.gpus), fmt::format("{:.0f}", j.floor_w),
                    fmt::format("{:.0f}", j.mean_grant_w), Number(j.tokens),
                    Number(i < r.baseline.jobs.size() ? r.baseline.jobs[i].tokens : 0.0),
                    Number(i < r.own_budgets.jobs.size() ? r.own_budgets.jobs[i].tokens : 0.0),
                    j.admitted ? "yes" : "no"});
  }
  return "<h2>Jobs</h2>" + HtmlTable({"job", "GPUs", "floor W", "mean grant W", "tokens",
                                      "tokens, no budget", "tokens, own budget", "admitted"},
                                     jobs);
}

// The report's one sentence: the site budget's violations, peak and tokens.
std::string Headline(const FleetSimResult& r) {
  return fmt::format(
      "Under one site budget of {} W ({:.1f} % of nameplate): {:.2f} % of 30 s windows over it, "
      "peak {:.1f} % of nameplate, {} tokens ({} against each job on its own budget); with no "
      "budget at all, {:.2f} % of 30 s windows would be over it.",
      Number(r.site_budget_w), 100.0 * r.site_budget_w / r.nameplate_w,
      100.0 * r.site.violation_fraction[1], 100.0 * r.site.peak_fraction_of_nameplate[1],
      Number(r.site.tokens),
      r.own_budgets.tokens > 0.0
          ? fmt::format("{:+.1f} %", 100.0 * (r.site.tokens / r.own_budgets.tokens - 1.0))
          : std::string("-"),
      100.0 * r.baseline.violation_fraction[1]);
}

}  // namespace

std::string FleetSimReportHtml(const FleetSimResult& r, uint64_t seed) {
  std::string body;
  body += fmt::format(
      "<p>{} jobs, {:.0f} W nameplate, site budget <b>{:.0f} W</b> ({:.1f} % of nameplate), "
      "reserve {:.0f} W, {:.0f} simulated seconds, seed {}, store {}.</p>",
      r.site.jobs.size(), r.nameplate_w, r.site_budget_w, 100.0 * r.site_budget_w / r.nameplate_w,
      r.reserve_w, r.duration_s, seed, HtmlEscape(r.store));
  body += SummaryTables(r);
  body += PowerChart(r, r.site, "Under the site budget: grants (stacked) and the site's true power",
                     true);
  if (r.opportunistic) body += SpareSection(r);
  body += fmt::format(
      "<h2>Each job's phases under the site budget</h2><p>stagger {}: {} holds, {:.0f} s held "
      "in all, {:.2f} % of the tokens. A hold is the job idle at the start of a step.</p>{}",
      HtmlEscape(r.stagger), r.site.hold_count, r.site.hold_total_s, r.site.hold_tokens_cost_pct,
      PhaseTimeline(r.site, r.duration_s));
  body += PowerChart(r, r.baseline,
                     "No budget at all (the trainers' own settings): the site's true power against "
                     "the site budget it would have had",
                     false);
  body += PowerChart(r, r.own_budgets,
                     "Each job on its own budget (stacked) and the site's true power", true);
  body += JobsTable(r);
  return Page("headroom fleet-sim", HtmlEscape(Headline(r)), body);
}

}  // namespace headroom::site_sim
