#include "report/pilot_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/duration.h"
#include "report/table.h"
#include "report_page/format.h"
#include "report_page/html_page.h"
#include "report_page/svg.h"

namespace headroom::report {
namespace {

using nlohmann::ordered_json;

ordered_json OrNull(const std::optional<double>& v) {
  return v ? ordered_json(*v) : ordered_json();
}

std::string Num(double v) { return Significant(v, 4); }
std::string SignedPct(const std::optional<double>& v) {
  return v ? fmt::format("{:+.2f}%", *v) : "-";
}
std::string PctInterval(const pilot::BootstrapResult& b) {
  if (!b.effect_lo_pct) return "-";
  return fmt::format("[{:+.2f}%, {:+.2f}%]", *b.effect_lo_pct, *b.effect_hi_pct);
}
std::string PValue(const pilot::PermutationResult& p) {
  return fmt::format("{:.4f}{}", p.p_value, p.exact ? " (exact)" : "");
}

std::string MetricUnit(pilot::Metric m) {
  switch (m) {
    case pilot::Metric::kTokensPerMwh:
      return "tokens per MWh";
    case pilot::Metric::kViolations:
      return "violation fraction";
    case pilot::Metric::kEnergy:
      return "MWh";
  }
  return "";
}

ordered_json EffectJson(const pilot::Effect& e) {
  ordered_json j;
  j["controlled_blocks"] = e.controlled_blocks;
  j["uncontrolled_blocks"] = e.uncontrolled_blocks;
  j["controlled_mean"] = e.controlled_mean;
  j["uncontrolled_mean"] = e.uncontrolled_mean;
  j["difference"] = e.difference;
  j["difference_ci"] = {e.interval.difference_lo, e.interval.difference_hi};
  j["effect_pct"] = OrNull(e.effect_pct);
  j["effect_ci_pct"] = e.interval.effect_lo_pct
                           ? ordered_json{*e.interval.effect_lo_pct, *e.interval.effect_hi_pct}
                           : ordered_json();
  j["p_value"] = e.permutation.p_value;
  j["p_exact"] = e.permutation.exact;
  j["permutations"] = e.permutation.permutations;
  j["significant"] = e.significant;
  return j;
}

ordered_json GroupJson(const pilot::JudgedGroup& g) {
  ordered_json j;
  if (!g.job.empty()) j["job"] = g.job;
  j["controlled_blocks"] = g.controlled_blocks;
  j["uncontrolled_blocks"] = g.uncontrolled_blocks;
  ordered_json metrics = ordered_json::object();
  for (const auto& m : g.metrics) metrics[m.name] = EffectJson(m.effect);
  j["metrics"] = metrics;
  j["notes"] = g.notes;
  return j;
}

void GroupRows(const pilot::JudgedGroup& g, TextTable& t,
               std::vector<std::vector<std::string>>* html_rows) {
  for (const auto& m : g.metrics) {
    const auto& e = m.effect;
    std::vector<std::string> row = {m.name,
                                    Num(e.controlled_mean),
                                    Num(e.uncontrolled_mean),
                                    SignedPct(e.effect_pct),
                                    PctInterval(e.interval),
                                    PValue(e.permutation)};
    if (html_rows) html_rows->push_back(row);
    t.AddRow(std::move(row));
  }
}

const std::vector<std::string> kEffectHeader = {"metric", "controlled", "uncontrolled",
                                                "effect", "interval",   "p (permutation)"};

}  // namespace

ordered_json PilotPlanToJson(const pilot::PilotPlan& p, const PilotBaseline& baseline) {
  const auto& o = p.options;
  ordered_json j;
  j["metric"] = std::string(pilot::MetricName(o.metric));
  j["effect_pct"] = 100.0 * o.effect_frac;
  j["alpha"] = o.alpha;
  j["power"] = o.power;
  j["block_s"] = o.block_s;
  j["blocks"] = p.blocks;
  j["days"] = p.days;
  j["autocorrelation_lag1"] = p.autocorrelation_lag1;
  j["gpu_hours_at_risk"] = p.gpu_hours_at_risk;
  j["cost_usd"] = p.cost_usd;
  if (o.metric == pilot::Metric::kViolations) j["window_s"] = o.window_s;
  j["blocks_per_arm"] = p.size.blocks_per_arm;
  j["baseline_blocks"] = p.baseline_blocks;
  j["baseline_traces"] = baseline.traces;
  j["baseline_mean"] = p.baseline_mean;
  j["baseline_sd"] = p.baseline_sd;
  j["delta"] = p.size.delta;
  j["variance_inflation"] = p.size.variance_inflation;
  j["z_alpha"] = p.size.z_alpha;
  j["z_power"] = p.size.z_power;
  j["formula_blocks_per_arm"] = p.size.formula_blocks_per_arm;
  j["permutation_floor_blocks_per_arm"] = p.size.permutation_floor;
  j["gpus"] = o.gpus;
  j["usd_per_gpu_hour"] = o.usd_per_gpu_hour;
  j["seed"] = o.seed;
  j["advice"] = p.advice;
  ordered_json schedule = ordered_json::array();
  for (const auto& b : p.schedule) {
    schedule.push_back(
        {{"block", b.index}, {"start_s", b.start_s}, {"arm", std::string(pilot::ArmName(b.arm))}});
  }
  j["schedule"] = schedule;
  j["schedule_truncated"] = p.schedule_truncated;
  return j;
}

std::string PilotPlanToText(const pilot::PilotPlan& p, const PilotBaseline& baseline) {
  const auto& o = p.options;
  std::string out = fmt::format(
      "pilot plan: {} ({}), effect {:+g}%, alpha {:g} (two-sided), power {:g}, blocks of {}\n"
      "baseline: {} block{} from {} trace{}\n\n",
      pilot::MetricName(o.metric), MetricUnit(o.metric), 100.0 * o.effect_frac, o.alpha, o.power,
      FormatDurationS(o.block_s), p.baseline_blocks, p.baseline_blocks == 1 ? "" : "s",
      baseline.traces.size(), baseline.traces.size() == 1 ? "" : "s");
  TextTable t({"quantity", "value"});
  t.AddRow({"baseline block mean", Num(p.baseline_mean)});
  t.AddRow({"baseline block sd", Num(p.baseline_sd)});
  t.AddRow({"lag-1 autocorrelation", fmt::format("{:.3f}", p.autocorrelation_lag1)});
  t.AddRow({"variance inflation", fmt::format("{:.2f}", p.size.variance_inflation)});
  t.AddRow({"blocks per arm", fmt::format("{}", p.size.blocks_per_arm)});
  t.AddRow({"blocks (both arms)", fmt::format("{}", p.blocks)});
  t.AddRow({"days", fmt::format("{:.2f}", p.days)});
  t.AddRow({"GPUs", fmt::format("{}", o.gpus)});
  t.AddRow({"GPU-hours at risk", fmt::format("{:.1f}", p.gpu_hours_at_risk)});
  t.AddRow(
      {"cost (USD)", fmt::format("{:.0f} at {:g} USD/GPU-hour", p.cost_usd, o.usd_per_gpu_hour)});
  out += t.Render();
  if (!p.schedule.empty()) {
    out += "\nfirst blocks: ";
    for (size_t i = 0; i < std::min<size_t>(p.schedule.size(), 8); ++i) {
      out += fmt::format("{}{}", i ? ", " : "",
                         p.schedule[i].arm == pilot::Arm::kControlled ? "C" : "U");
    }
    out += p.schedule.size() > 8 ? ", ... (--json for all)\n" : "\n";
  }
  for (const auto& a : p.advice) out += "note: " + a + "\n";
  return out;
}

std::string PilotPlanReportHtml(const pilot::PilotPlan& p, const PilotBaseline& baseline) {
  const auto& o = p.options;
  std::string body = fmt::format(
      "<p>A pilot of alternating blocks of {}, controlled and uncontrolled in a random order "
      "within each pair, to detect a {:+g}% change of <b>{}</b> at alpha {:g} (two-sided) with "
      "power {:g} (docs/PILOT.md).</p>",
      HtmlEscape(FormatDurationS(o.block_s)), 100.0 * o.effect_frac,
      HtmlEscape(std::string(pilot::MetricName(o.metric))), o.alpha, o.power);
  body += HtmlTable({"quantity", "value"},
                    {{"baseline blocks", fmt::format("{}", p.baseline_blocks)},
                     {"baseline block mean", Num(p.baseline_mean)},
                     {"baseline block sd", Num(p.baseline_sd)},
                     {"lag-1 autocorrelation", fmt::format("{:.3f}", p.autocorrelation_lag1)},
                     {"variance inflation", fmt::format("{:.2f}", p.size.variance_inflation)},
                     {"blocks per arm", fmt::format("{}", p.size.blocks_per_arm)},
                     {"blocks (both arms)", fmt::format("{}", p.blocks)},
                     {"days", fmt::format("{:.2f}", p.days)},
                     {"GPU-hours at risk", fmt::format("{:.1f}", p.gpu_hours_at_risk)},
                     {"cost (USD)", fmt::format("{:.0f}", p.cost_usd)}});
  for (const auto& a : p.advice) body += "<p class=\"note\">" + HtmlEscape(a) + "</p>";
  // The baseline's block series, one line per trace.
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  size_t longest = 1;
  for (const auto& s : baseline.blocks) {
    for (double v : s) lo = std::min(lo, v), hi = std::max(hi, v);
    longest = std::max(longest, s.size());
  }
  if (std::isfinite(lo)) {
    if (hi <= lo) hi = lo + 1.0;
    SvgChart c({0.0, static_cast<double>(longest), false, "block", 1.0},
               {lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo), false, MetricUnit(o.metric), 1.0});
    static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                    "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
    for (size_t i = 0; i < baseline.blocks.size(); ++i) {
      std::vector<double> xs(baseline.blocks[i].size());
      for (size_t k = 0; k < xs.size(); ++k) xs[k] = static_cast<double>(k) + 0.5;
      c.Line(xs, baseline.blocks[i], kColors[i % 8], baseline.traces[i]);
    }
    c.HorizontalRule(p.baseline_mean, "#000", "baseline mean");
    body += "<h2>Baseline blocks</h2>" + c.Render();
  }
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < std::min<size_t>(p.schedule.size(), 200); ++i) {
    rows.push_back({fmt::format("{}", p.schedule[i].index), FormatDurationS(p.schedule[i].start_s),
                    std::string(pilot::ArmName(p.schedule[i].arm))});
  }
  body += "<h2>Schedule</h2>" + HtmlTable({"block", "starts after", "arm"}, rows);
  if (p.schedule.size() > 200) body += "<p class=\"note\">The rest in the JSON.</p>";
  const std::string headline = fmt::format(
      "To detect a {:+g} % change of {}: {} blocks of {} ({} per arm, {:.1f} days), {} GPU-hours "
      "at risk, {} USD.",
      100.0 * o.effect_frac, pilot::MetricName(o.metric), p.blocks, FormatDurationS(o.block_s),
      p.size.blocks_per_arm, p.days, Number(p.gpu_hours_at_risk, 1), Number(p.cost_usd));
  return Page("headroom pilot plan", HtmlEscape(headline), body);
}

ordered_json PilotReportToJson(const pilot::PilotReport& r) {
  ordered_json j;
  const auto& o = r.options;
  j["blocks"] = r.blocks.size();
  j["controlled_blocks"] = r.all.controlled_blocks;
  j["uncontrolled_blocks"] = r.all.uncontrolled_blocks;
  j["alpha"] = o.effect.alpha;
  j["interval"] = "expanded percentile block bootstrap";
  j["bootstrap_resamples"] = o.effect.bootstrap_resamples;
  j["seed"] = o.effect.seed;
  j["energy_price_usd_per_mwh"] = o.energy_price_usd_per_mwh;
  j["carbon_g_per_kwh"] = o.carbon_g_per_kwh;
  ordered_json all = GroupJson(r.all);
  j["metrics"] = all["metrics"];
  j["notes"] = all["notes"];
  ordered_json jobs = ordered_json::array();
  for (const auto& g : r.jobs) jobs.push_back(GroupJson(g));
  j["jobs"] = jobs;
  ordered_json blocks = ordered_json::array();
  for (const auto& b : r.blocks) {
    ordered_json jb;
    jb["block"] = b.block;
    jb["arm"] = std::string(pilot::ArmName(b.arm));
    jb["duration_s"] = b.duration_s;
    for (const auto& [name, v] : b.values) jb[name] = OrNull(v);
    blocks.push_back(jb);
  }
  j["block_values"] = blocks;
  j["warnings"] = r.warnings;
  return j;
}

std::string PilotReportToText(const pilot::PilotReport& r) {
  std::string out = fmt::format(
      "pilot report: {} controlled and {} uncontrolled blocks; effect = controlled / "
      "uncontrolled - 1 of block means; {:g}% intervals (block bootstrap, {} resamples); "
      "p from permuting the arm labels\n\n",
      r.all.controlled_blocks, r.all.uncontrolled_blocks, 100.0 * (1.0 - r.options.effect.alpha),
      r.options.effect.bootstrap_resamples);
  TextTable t(kEffectHeader);
  GroupRows(r.all, t, nullptr);
  out += t.Render();
  for (const auto& n : r.all.notes) out += "note: " + n + "\n";
  for (const auto& g : r.jobs) {
    out += fmt::format("\njob {}: {} controlled, {} uncontrolled blocks\n", g.job,
                       g.controlled_blocks, g.uncontrolled_blocks);
    TextTable jt(kEffectHeader);
    GroupRows(g, jt, nullptr);
    if (!g.metrics.empty()) out += jt.Render();
    for (const auto& n : g.notes) out += "note: " + n + "\n";
  }
  for (const auto& w : r.warnings) out += "warning: " + w + "\n";
  return out;
}

std::string PilotReportHtml(const pilot::PilotReport& r) {
  std::string body = fmt::format(
      "<p>{} controlled and {} uncontrolled blocks. Effect = controlled ÷ uncontrolled − 1 of "
      "the block means; {:g}% intervals from the expanded percentile block bootstrap ({} "
      "resamples, seed {}); p from permuting the arm labels across blocks "
      "(docs/PILOT.md).</p>",
      r.all.controlled_blocks, r.all.uncontrolled_blocks, 100.0 * (1.0 - r.options.effect.alpha),
      r.options.effect.bootstrap_resamples, r.options.effect.seed);
  TextTable unused(kEffectHeader);
  std::vector<std::vector<std::string>> rows;
  GroupRows(r.all, unused, &rows);
  body += HtmlTable(kEffectHeader, rows);
  for (const auto& n : r.all.notes) body += "<p class=\"note\">" + HtmlEscape(n) + "</p>";
  // Each metric's blocks by arm.
  for (const auto& m : r.all.metrics) {
    std::vector<double> cx, cy, ux, uy;
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (size_t i = 0; i < r.blocks.size(); ++i) {
      for (const auto& [name, v] : r.blocks[i].values) {
        if (name != m.name || !v) continue;
        auto& xs = r.blocks[i].arm == pilot::Arm::kControlled ? cx : ux;
        auto& ys = r.blocks[i].arm == pilot::Arm::kControlled ? cy : uy;
        xs.push_back(static_cast<double>(i) + 0.5);
        ys.push_back(*v);
        lo = std::min(lo, *v), hi = std::max(hi, *v);
      }
    }
    if (!std::isfinite(lo)) continue;
    if (hi <= lo) hi = lo + (lo == 0.0 ? 1.0 : std::abs(lo) * 0.1);
    SvgChart c({0.0, static_cast<double>(r.blocks.size()), false, "block", 1.0},
               {lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo), false, m.name, 1.0});
    c.Points(cx, cy, "#1f77b4", "controlled");
    c.Points(ux, uy, "#ff7f0e", "uncontrolled");
    c.HorizontalRule(m.effect.controlled_mean, "#1f77b4", "controlled mean");
    c.HorizontalRule(m.effect.uncontrolled_mean, "#ff7f0e", "uncontrolled mean");
    body += "<h2>" + HtmlEscape(m.name) + " per block</h2>" + c.Render();
  }
  for (const auto& g : r.jobs) {
    body += "<h2>Job " + HtmlEscape(g.job) + "</h2>";
    std::vector<std::vector<std::string>> jrows;
    TextTable jt(kEffectHeader);
    GroupRows(g, jt, &jrows);
    if (!jrows.empty()) body += HtmlTable(kEffectHeader, jrows);
    for (const auto& n : g.notes) body += "<p class=\"note\">" + HtmlEscape(n) + "</p>";
  }
  for (const auto& w : r.warnings) body += "<p class=\"note\">" + HtmlEscape(w) + "</p>";
  std::string headline = "No metric could be compared.";
  if (!r.all.metrics.empty()) {
    const auto& m = r.all.metrics.front();
    headline = fmt::format(
        "{}: controlled {} against uncontrolled over {} + {} blocks (p = {}){}.", m.name,
        m.effect.effect_pct ? fmt::format("{:+.2f} %", *m.effect.effect_pct) : std::string("-"),
        m.effect.controlled_blocks, m.effect.uncontrolled_blocks,
        Significant(m.effect.permutation.p_value, 3),
        m.effect.significant ? ", significant" : ", not significant");
  }
  return Page("headroom pilot report", HtmlEscape(headline), body);
}

ordered_json PilotValidationToJson(const pilot::SimulationResult& r,
                                   const PilotValidationInfo& info) {
  ordered_json j;
  j["metric"] = info.metric;
  j["block_s"] = info.block_s;
  j["baseline_blocks"] = info.baseline_blocks;
  j["effect_pct"] = 100.0 * info.effect_frac;
  j["alpha"] = info.alpha;
  j["pilots"] = r.pilots;
  j["blocks_per_arm"] = r.blocks_per_arm;
  const auto cov = pilot::WilsonInterval(r.covered, r.pilots);
  const auto fp = pilot::WilsonInterval(r.null_significant, r.pilots);
  const auto pw = pilot::WilsonInterval(r.detected, r.pilots);
  j["coverage"] = r.coverage();
  j["coverage_ci"] = {cov.lo, cov.hi};
  j["false_positive_rate"] = r.false_positive_rate();
  j["false_positive_rate_ci"] = {fp.lo, fp.hi};
  j["power"] = r.power();
  j["power_ci"] = {pw.lo, pw.hi};
  j["interval_undefined"] = r.undefined;
  j["null_coverage"] = r.pilots ? static_cast<double>(r.null_covered) / r.pilots : 0.0;
  return j;
}

std::string PilotValidationToText(const pilot::SimulationResult& r,
                                  const PilotValidationInfo& info) {
  const auto cov = pilot::WilsonInterval(r.covered, r.pilots);
  const auto fp = pilot::WilsonInterval(r.null_significant, r.pilots);
  const auto pw = pilot::WilsonInterval(r.detected, r.pilots);
  std::string out = fmt::format(
      "pilot validate: {} simulated pilots of {} blocks per arm ({} blocks of {}, from {} "
      "baseline blocks), injected effect {:+g}%, alpha {:g}\n\n",
      r.pilots, r.blocks_per_arm, info.metric, FormatDurationS(info.block_s), info.baseline_blocks,
      100.0 * info.effect_frac, info.alpha);
  TextTable t({"figure", "value", "95% Wilson interval"});
  t.AddRow({"coverage (interval holds the injected effect)",
            fmt::format("{}/{} = {:.2f}", r.covered, r.pilots, r.coverage()),
            fmt::format("[{:.3f}, {:.3f}]", cov.lo, cov.hi)});
  t.AddRow({"false positives (null effect, p <= alpha)",
            fmt::format("{}/{} = {:.2f}", r.null_significant, r.pilots, r.false_positive_rate()),
            fmt::format("[{:.3f}, {:.3f}]", fp.lo, fp.hi)});
  t.AddRow({"power (effect detected, p <= alpha)",
            fmt::format("{}/{} = {:.2f}", r.detected, r.pilots, r.power()),
            fmt::format("[{:.3f}, {:.3f}]", pw.lo, pw.hi)});
  out += t.Render();
  if (r.undefined > 0) {
    out += fmt::format(
        "note: {} of the {} effect pilots had no relative interval (a resampled uncontrolled "
        "mean of 0); they count as not covered\n",
        r.undefined, r.pilots);
  }
  return out;
}

}  // namespace headroom::report
