#include "report/eval_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "report/json.h"
#include "report/table.h"
#include "report_page/format.h"
#include "report_page/html_page.h"
#include "report_page/svg.h"

namespace headroom::report {

namespace {

using nlohmann::ordered_json;

ordered_json StatJson(const sim::Stat& s) { return {{"mean", s.mean}, {"std", s.std}}; }
ordered_json Opt(const std::optional<double>& v) {
  return v ? ordered_json(*v) : ordered_json(nullptr);
}
std::string PctText(const std::optional<double>& v) {
  return v ? fmt::format("{:+.1f}%", *v) : "-";
}
std::string FracText(const sim::Stat& s) {
  return fmt::format("{:.2f}±{:.2f}%", 100.0 * s.mean, 100.0 * s.std);
}
std::string SecondsText(const std::optional<double>& v) {
  return v ? fmt::format("{:.1f}", *v) : "-";
}
std::string ScheduleText(const sim::ScheduleInfo& s) {
  return fmt::format(
      "{}: {:.1f}-{:.1f} W per GPU, {} changes ({} decreases) over the seeds{}{}", s.name,
      s.lowest_w, s.highest_w, s.changes, s.decreases,
      s.notice_s > 0.0 ? fmt::format(", announced {:g} s ahead", s.notice_s) : "",
      s.clipped > 0 ? fmt::format(", {} levels cut at the scenario's range", s.clipped) : "");
}

constexpr const char* kPolicyColors[] = {"#7f7f7f", "#2ca02c", "#9467bd", "#ff7f0e", "#1f77b4"};

}  // namespace

ordered_json EvalToJson(const sim::EvalResult& r) {
  ordered_json j;
  j["scenario"] = r.scenario;
  j["budget_w"] = r.budget_w;
  j["seeds"] = r.seeds;
  j["steps"] = r.steps;
  j["horizon"] = std::string(sim::HorizonName(r.horizon));
  j["violation_target"] = r.violation_target;
  j["horizon_s"] = r.horizon_s;
  if (r.schedule) {
    const sim::ScheduleInfo& sch = *r.schedule;
    ordered_json b;
    b["name"] = sch.name;
    b["notice_s"] = sch.notice_s;
    b["lowest_w"] = sch.lowest_w;
    b["highest_w"] = sch.highest_w;
    b["changes"] = sch.changes;
    b["decreases"] = sch.decreases;
    b["clipped"] = sch.clipped;
    auto oracle = ordered_json::array();
    for (const sim::OracleLevel& l : r.oracle) {
      oracle.push_back({{"budget_w", l.budget_w},
                        {"concurrency", l.setting.concurrency},
                        {"group_size", l.setting.group_size},
                        {"meets_target", l.setting.meets_target}});
    }
    b["static_oracle_levels"] = std::move(oracle);
    j["budget_schedule"] = std::move(b);
  }
  auto controllers = ordered_json::array();
  for (const auto& c : r.controllers) {
    ordered_json e;
    e["name"] = c.name;
    e["setting"] = c.setting;
    e["violation_fraction"] = {{"0.5s", StatJson(c.violation_fraction[0])},
                               {"30s", StatJson(c.violation_fraction[1])},
                               {"5min", StatJson(c.violation_fraction[2])}};
    e["tokens"] = StatJson(c.tokens);
    e["energy_j"] = StatJson(c.energy_j);
    e["tokens_per_mwh"] = StatJson(c.tokens_per_mwh);
    e["mean_concurrency"] = StatJson(c.mean_concurrency);
    e["mean_group_size"] = StatJson(c.mean_group_size);
    {
      std::vector<double> duration, steps;
      for (const auto& run : c.runs) {
        duration.push_back(run.duration_s);
        steps.push_back(run.steps_done);
      }
      e["duration_s"] = StatJson(sim::StatOf(duration));
      e["power_limit"] = {{"fraction", StatJson(c.limit_fraction)},
                          {"depth", StatJson(c.limit_depth)}};
      e["steps_done"] = StatJson(sim::StatOf(steps));
    }
    e["tokens_vs_uncontrolled_pct"] = Opt(c.tokens_vs_uncontrolled_pct);
    e["tokens_vs_static_safe_pct"] = Opt(c.tokens_vs_static_safe_pct);
    e["violations_vs_uncontrolled_pct"] = Opt(c.violations_vs_uncontrolled_pct);
    e["tokens_per_mwh_vs_uncontrolled_pct"] = Opt(c.tokens_per_mwh_vs_uncontrolled_pct);
    if (c.settle) {
      e["settle_s"] = SettleToJson(*c.settle);
      e["tokens_vs_static_safe_lowest_pct"] = Opt(c.tokens_vs_static_safe_lowest_pct);
      e["tokens_vs_static_oracle_pct"] = Opt(c.tokens_vs_static_oracle_pct);
    }
    controllers.push_back(std::move(e));
  }
  j["controllers"] = std::move(controllers);
  return j;
}

std::string EvalToText(const sim::EvalResult& r) {
  double mean_h = 0.0;
  for (double h : r.horizon_s) mean_h += h / static_cast<double>(r.horizon_s.size());
  std::string out =
      r.horizon == sim::Horizon::kSteps
          ? fmt::format(
                "scenario   {} at {:.1f} W per GPU; {} seeds x {} steps each (horizon "
                "steps; uncontrolled: {:.0f} s)\n",
                r.scenario, r.budget_w, r.seeds, r.steps, mean_h)
          : fmt::format(
                "scenario   {} at {:.1f} W per GPU; {} seeds x {:.0f} s (the time of {} "
                "uncontrolled steps)\n",
                r.scenario, r.budget_w, r.seeds, mean_h, r.steps);
  out += fmt::format(
      "target     0.5 s violation fraction <= {:.2f}% (static-safe and pid searched on "
      "calibration seeds)\n",
      100.0 * r.violation_target);
  if (r.schedule) {
    out += fmt::format("budget     moving, {}\n\n", ScheduleText(*r.schedule));
    TextTable t({"controller", "viol 0.5s", "viol 30s", "viol 5min", "tokens",
                 "vs static-safe-lowest", "vs static-oracle", "settle p50 s", "p99 s", "max s",
                 "unsettled", "energy kWh"});
    for (const auto& c : r.controllers) {
      t.AddRow({c.name, FracText(c.violation_fraction[0]), FracText(c.violation_fraction[1]),
                FracText(c.violation_fraction[2]), fmt::format("{:.0f}", c.tokens.mean),
                PctText(c.tokens_vs_static_safe_lowest_pct), PctText(c.tokens_vs_static_oracle_pct),
                SecondsText(c.settle->p50_s), SecondsText(c.settle->p99_s),
                SecondsText(c.settle->max_s),
                fmt::format("{}/{}", c.settle->unsettled, c.settle->events),
                fmt::format("{:.3f}", c.energy_j.mean / 3.6e6)});
    }
    out += t.Render();
  } else {
    out += "\n";
  }
  TextTable t({"controller", "viol 0.5s", "viol 30s", "viol 5min", "tokens", "vs uncontrolled",
               "vs static-safe", "tokens/MWh", "vs unc.", "energy kWh"});
  for (const auto& c : r.controllers) {
    t.AddRow({c.name, FracText(c.violation_fraction[0]), FracText(c.violation_fraction[1]),
              FracText(c.violation_fraction[2]), fmt::format("{:.0f}", c.tokens.mean),
              PctText(c.tokens_vs_uncontrolled_pct), PctText(c.tokens_vs_static_safe_pct),
              fmt::format("{:.4g}", c.tokens_per_mwh.mean),
              PctText(c.tokens_per_mwh_vs_uncontrolled_pct),
              fmt::format("{:.3f}", c.energy_j.mean / 3.6e6)});
  }
  if (!r.schedule) out += t.Render();
  out += "\n";
  TextTable s({"controller", "setting", "mean concurrency", "mean group size",
               "power limit in force", "its depth"});
  s.AlignLeft(1);
  for (const auto& c : r.controllers) {
    s.AddRow({c.name, c.setting, fmt::format("{:.1f}", c.mean_concurrency.mean),
              fmt::format("{:.1f}", c.mean_group_size.mean),
              fmt::format("{:.1f}%", 100.0 * c.limit_fraction.mean),
              c.limit_fraction.mean > 0.0 ? fmt::format("{:.1f}%", 100.0 * c.limit_depth.mean)
                                          : std::string("-")});
  }
  out += s.Render();
  return out;
}

std::string EvalReportHtml(const sim::EvalResult& r, double interval_s) {
  std::string body = fmt::format(
      "<p>Scenario <b>{}</b>, budget {:.1f} W per GPU, {} seeds, each controller for the time the "
      "uncontrolled trainer takes for {} steps on that seed. Violations are scored on the true "
      "power (the job's sum against budget x GPUs) in tumbling windows.</p>\n",
      HtmlEscape(r.scenario), r.budget_w, r.seeds, r.steps);
  if (r.schedule) {
    body += fmt::format(
        "<p>The budget moves ({}); windows are scored against its time-weighted mean over each "
        "window, and settle_s is the time from a decrease until the 1 s mean power stays at or "
        "below the new budget for 5 s.</p>\n",
        HtmlEscape(ScheduleText(*r.schedule)));
    std::vector<std::vector<std::string>> srows;
    for (const auto& c : r.controllers) {
      srows.push_back(
          {c.name, FracText(c.violation_fraction[0]), fmt::format("{:.0f}", c.tokens.mean),
           PctText(c.tokens_vs_static_safe_lowest_pct), PctText(c.tokens_vs_static_oracle_pct),
           SecondsText(c.settle->p50_s), SecondsText(c.settle->p99_s), SecondsText(c.settle->max_s),
           fmt::format("{}/{}", c.settle->unsettled, c.settle->events)});
    }
    body += "<h2>Under the moving budget</h2>\n";
    body += HtmlTable({"controller", "viol 0.5 s", "tokens", "vs static-safe-lowest",
                       "vs static-oracle", "settle p50 (s)", "p99 (s)", "max (s)", "unsettled"},
                      srows);
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : r.controllers) {
    rows.push_back({c.name, FracText(c.violation_fraction[0]), FracText(c.violation_fraction[1]),
                    FracText(c.violation_fraction[2]), Number(c.tokens.mean),
                    PctText(c.tokens_vs_uncontrolled_pct), PctText(c.tokens_vs_static_safe_pct),
                    Number(c.tokens_per_mwh.mean), PctText(c.tokens_per_mwh_vs_uncontrolled_pct),
                    c.setting});
  }
  body += "<h2>Results (mean ± std over seeds)</h2>\n";
  body +=
      HtmlTable({"controller", "viol 0.5 s", "viol 30 s", "viol 5 min", "tokens", "vs uncontrolled",
                 "vs static-safe", "tokens/MWh", "vs uncontrolled", "setting"},
                rows);
  // Power over time, seed 1: the first 10 minutes (or all of it) at 0.5 s; under a moving
  // budget the whole run, in means of up to 1,200 points, with the budget as it moved.
  body += r.schedule ? "<h2>Power per GPU against the moving budget (seed 1, the whole run)</h2>\n"
                     : "<h2>Power per GPU against the budget (seed 1, first 10 minutes, 0.5 s "
                       "means)</h2>\n";
  size_t n = 0;
  float top = static_cast<float>(r.budget_w);
  for (const auto& c : r.controllers) {
    if (c.runs.empty()) continue;
    n = std::max(n, c.runs[0].power_w.size());
    for (float p : c.runs[0].power_w) top = std::max(top, p);
    for (float b : c.runs[0].budget_w) top = std::max(top, b);
    for (float l : c.runs[0].power_limit_w) top = std::max(top, l);
  }
  if (!r.schedule) n = std::min(n, static_cast<size_t>(600.0 / interval_s));
  const size_t stride = std::max<size_t>(1, (n + 1199) / 1200);
  const auto bucketed = [&](const std::vector<float>& v, std::vector<double>* xs,
                            std::vector<double>* ys) {
    for (size_t i = 0; i < std::min(n, v.size()); i += stride) {
      double sum = 0.0;
      size_t k = 0;
      for (; k < stride && i + k < std::min(n, v.size()); ++k) sum += v[i + k];
      xs->push_back(static_cast<double>(i) * interval_s);
      ys->push_back(sum / static_cast<double>(k));
    }
  };
  if (n > 1) {
    for (size_t ci = 0; ci < r.controllers.size(); ++ci) {
      const auto& c = r.controllers[ci];
      if (c.runs.empty() || c.runs[0].power_w.empty()) continue;
      SvgChart chart(Axis{0.0, static_cast<double>(n) * interval_s, false, "time (s)", 1.0},
                     Axis{0.0, top * 1.08, false, "power per GPU (W)", 1.0});
      std::vector<double> xs, ys;
      bucketed(c.runs[0].power_w, &xs, &ys);
      chart.Line(xs, ys, kPolicyColors[ci % 5], c.name);
      if (!c.runs[0].budget_w.empty()) {
        std::vector<double> bx, by;
        bucketed(c.runs[0].budget_w, &bx, &by);
        chart.Line(bx, by, "#d62728", "budget");
      } else {
        chart.HorizontalRule(r.budget_w, "#d62728", "budget");
      }
      if (!c.runs[0].power_limit_w.empty()) {
        std::vector<double> lx, ly;
        bucketed(c.runs[0].power_limit_w, &lx, &ly);
        chart.Line(lx, ly, "#444444", "power limit in force", /*dashed=*/true);
      }
      body += "<h3>" + HtmlEscape(c.name) + "</h3>\n" + chart.Render();
    }
    // What each controller did, all on one chart per actuator (seed 1, the same span).
    const auto actuator = [&](const char* title, const char* label,
                              std::vector<float> sim::EpisodeResult::*series) {
      double hi = 1.0;
      for (const auto& c : r.controllers) {
        if (c.runs.empty()) continue;
        const auto& v = c.runs[0].*series;
        for (size_t i = 0; i < std::min(n, v.size()); ++i) hi = std::max(hi, double{v[i]});
      }
      SvgChart chart(Axis{0.0, static_cast<double>(n) * interval_s, false, "time (s)", 1.0},
                     Axis{0.0, hi * 1.08, false, label, 1.0});
      for (size_t ci = 0; ci < r.controllers.size(); ++ci) {
        const auto& c = r.controllers[ci];
        if (c.runs.empty() || (c.runs[0].*series).empty()) continue;
        std::vector<double> xs, ys;
        bucketed(c.runs[0].*series, &xs, &ys);
        chart.Line(xs, ys, kPolicyColors[ci % 5], c.name);
      }
      body += fmt::format("<h2>{}</h2>\n", title) + chart.Render();
    };
    actuator("Generation concurrency (seed 1)", "concurrency", &sim::EpisodeResult::concurrency);
    actuator("Group size (seed 1)", "group size", &sim::EpisodeResult::group_size);
    actuator("Power limit in force per GPU (seed 1; nameplate: none)", "power limit (W)",
             &sim::EpisodeResult::power_limit_w);
  }
  std::vector<std::vector<std::string>> limit_rows;
  for (const auto& c : r.controllers) {
    limit_rows.push_back({c.name, c.setting, fmt::format("{:.1f}", c.mean_concurrency.mean),
                          fmt::format("{:.1f}", c.mean_group_size.mean),
                          fmt::format("{:.1f} %", 100.0 * c.limit_fraction.mean),
                          c.limit_fraction.mean > 0.0
                              ? fmt::format("{:.1f} %", 100.0 * c.limit_depth.mean)
                              : std::string("-")});
  }
  body += "<h2>Settings and the power limit in force (mean over seeds)</h2>\n";
  body += HtmlTable({"controller", "setting", "mean concurrency", "mean group size",
                     "intervals with a power limit", "mean limit depth"},
                    limit_rows);
  // The headline: the controllers' tokens at what violation, the best of those within the
  // target named.
  const sim::ControllerEval* best = nullptr;
  for (const auto& c : r.controllers) {
    if (c.violation_fraction[0].mean <= r.violation_target &&
        (best == nullptr || c.tokens.mean > best->tokens.mean)) {
      best = &c;
    }
  }
  std::string headline =
      best == nullptr
          ? fmt::format("No controller kept 0.5 s violations within {:.1f} % on {}.",
                        100.0 * r.violation_target, r.scenario)
          : fmt::format(
                "{} makes the most tokens within {:.1f} % of 0.5 s windows over budget: {} "
                "({} against uncontrolled) at {} violations, on {} at {:.1f} W per GPU.",
                best->name, 100.0 * r.violation_target, Number(best->tokens.mean),
                PctText(best->tokens_vs_uncontrolled_pct), FracText(best->violation_fraction[0]),
                r.scenario, r.budget_w);
  return Page("headroom eval", HtmlEscape(headline), body);
}

}  // namespace headroom::report
