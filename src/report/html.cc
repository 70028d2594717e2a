#include "report/html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/duration.h"
#include "report/table.h"
#include "report_page/format.h"
#include "report_page/html_page.h"
#include "report_page/svg.h"

namespace headroom::report {
namespace {

constexpr const char* kPowerColor = "#1f77b4";
constexpr const char* kMeanColor = "#0b3c66";
constexpr const char* kBudgetColor = "#d62728";
constexpr const char* kNameplateColor = "#7f7f7f";
constexpr const char* kAccentColor = "#ff7f0e";
constexpr const char* kMaxColor = "#2ca02c";
constexpr double kHeadroom = 1.08;  // y axes reach 8 % above the largest value shown

}  // namespace

namespace {

// A time axis in seconds, minutes or hours, whichever reads best for the span.
Axis TimeAxis(double min_s, double max_s) {
  Axis a{min_s, max_s > min_s ? max_s : min_s + 1.0, false, "time (s)", 1.0};
  const double span = a.max - a.min;
  if (span > 3.0 * 3600.0) {
    a.label = "time (h)";
    a.scale = 3600.0;
  } else if (span > 600.0) {
    a.label = "time (min)";
    a.scale = 60.0;
  }
  return a;
}

// The power-over-time chart of an envelope, with budget and nameplate rules.
std::string PowerChart(const analysis::Envelope& env, std::optional<double> budget_w,
                       std::optional<double> nameplate_w, const std::string& what) {
  std::vector<double> xs, lo, hi, mean;
  const auto& buckets = env.buckets();
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i].count == 0) continue;
    xs.push_back(env.origin_s() + (static_cast<double>(i) + 0.5) * env.bucket_s());
    lo.push_back(buckets[i].min_w);
    hi.push_back(buckets[i].max_w);
    mean.push_back(buckets[i].sum_w / static_cast<double>(buckets[i].count));
  }
  if (xs.empty()) return "";
  double top = *std::max_element(hi.begin(), hi.end());
  if (budget_w) top = std::max(top, *budget_w);
  if (nameplate_w) top = std::max(top, *nameplate_w);
  SvgChart chart(TimeAxis(env.origin_s(), xs.back() + 0.5 * env.bucket_s()),
                 Axis{0.0, top * kHeadroom, false, what + " power (W)", 1.0});
  chart.Band(xs, lo, hi, kPowerColor,
             fmt::format("min-max per {} bucket", FormatDurationS(env.bucket_s())));
  chart.Line(xs, mean, kMeanColor, "mean");
  if (budget_w) chart.HorizontalRule(*budget_w, kBudgetColor, "budget");
  if (nameplate_w) chart.HorizontalRule(*nameplate_w, kNameplateColor, "nameplate");
  return chart.Render();
}

}  // namespace

std::string AnalyzeReportHtml(const analysis::AnalyzeResult& r, const TraceInfo& info) {
  const std::string what = r.scope == analysis::Scope::kGpu ? "per-GPU" : "summed";
  std::string body;
  body += fmt::format(
      "<p>{} ({} format): {} samples from {} GPU(s), {:.1f} s, scope <b>{}</b>, "
      "budget {} W, nameplate {} W.</p>\n",
      HtmlEscape(info.path), info.format, r.samples, r.gpus, r.duration_s,
      analysis::ScopeName(r.scope), Watts(r.budget_w), Watts(r.nameplate_w));
  if (!info.resolution.empty()) {
    body += fmt::format("<p>Resolution: {}.</p>\n", HtmlEscape(info.resolution));
  }
  if (r.moving_budget) {
    const analysis::MovingBudgetResult& m = *r.moving_budget;
    body += fmt::format(
        "<p>The budget moves ({}): {} changes between {:.1f} and {:.1f} W, {:.1f} W on "
        "average; each window is scored against the budget's time-weighted mean over it.{}</p>\n",
        HtmlEscape(m.source), m.changes, m.min_w, m.max_w, m.mean_w,
        r.settle ? " Settling after a decrease: " + HtmlEscape(SettleText(*r.settle)) + "."
                 : std::string());
  }
  body += "<h2>Power over time</h2>\n";
  if (r.envelope) body += PowerChart(*r.envelope, r.budget_w, r.nameplate_w, what);
  // An agent's trace: what it decided, on the same time axis.
  for (const auto& [envelope, name] : {std::pair{&r.concurrency, "generation concurrency"},
                                       std::pair{&r.group_size, "group size"}}) {
    if (!*envelope || !r.envelope) continue;
    std::vector<double> xs, ys;
    double top = 1.0;
    const auto& buckets = (*envelope)->buckets();
    for (size_t i = 0; i < buckets.size(); ++i) {
      if (buckets[i].count == 0) continue;
      xs.push_back((*envelope)->origin_s() +
                   (static_cast<double>(i) + 0.5) * (*envelope)->bucket_s());
      ys.push_back(buckets[i].sum_w / static_cast<double>(buckets[i].count));
      top = std::max(top, ys.back());
    }
    if (xs.empty()) continue;
    const auto& env = *r.envelope;
    const double end = env.origin_s() + static_cast<double>(env.buckets().size()) * env.bucket_s();
    SvgChart chart(TimeAxis(std::min(env.origin_s(), xs.front()), std::max(end, xs.back())),
                   Axis{0.0, top * kHeadroom, false, name, 1.0});
    chart.Line(
        xs, ys, kAccentColor,
        fmt::format("{} (mean per {} bucket)", name, FormatDurationS((*envelope)->bucket_s())));
    body += fmt::format("<h2>The agent's {} over time</h2>\n", name) + chart.Render();
  }

  std::vector<double> xs, max_w, viol;
  for (const auto& w : r.curve) {
    if (!w.max_window_power_w) continue;
    xs.push_back(w.window_s);
    max_w.push_back(*w.max_window_power_w);
    viol.push_back(w.violation_fraction.value_or(0.0));
  }
  if (!xs.empty()) {
    const Axis x{xs.front(), xs.back() > xs.front() ? xs.back() : xs.front() * 10.0, true,
                 "window length (s)", 1.0};
    if (r.budget_w || r.moving_budget) {
      body += "<h2>Violations against window length</h2>\n";
      const double top = std::max(0.01, *std::max_element(viol.begin(), viol.end()) * kHeadroom);
      SvgChart chart(x, Axis{0.0, top, false, "windows over budget (%)", 0.01});
      chart.Line(xs, viol, kBudgetColor, "violation fraction");
      chart.Points(xs, viol, kBudgetColor, "");
      body += chart.Render();
    }
    body += "<h2>Largest window power against window length</h2>\n";
    double top = *std::max_element(max_w.begin(), max_w.end());
    if (r.budget_w) top = std::max(top, *r.budget_w);
    SvgChart chart(x, Axis{0.0, top * kHeadroom, false, "max window power (W)", 1.0});
    chart.Line(xs, max_w, kPowerColor, "max window power");
    chart.Points(xs, max_w, kPowerColor, "");
    if (r.budget_w) chart.HorizontalRule(*r.budget_w, kBudgetColor, "budget");
    body += chart.Render();
  }

  body += "<h2>Windows</h2>\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& w : r.windows) {
    rows.push_back({FormatDurationS(w.window_s), std::to_string(w.windows_counted),
                    Pct(w.violation_fraction), Watts(w.max_window_power_w)});
  }
  body += HtmlTable({"window", "counted", "over budget", "max window W"}, rows);
  body += "<h2>Summary</h2>\n" + HtmlTable({"metric", "value"}, AnalyzeSummaryRows(r));
  // The headline: how often the budget was broken at the shortest and a 30 s window, or, with
  // no budget, the peak against nameplate.
  std::string headline;
  if ((r.budget_w || r.moving_budget) && !r.windows.empty()) {
    const auto& shortest = r.windows.front();
    headline = fmt::format("{} of {} windows over the {}budget", Pct(shortest.violation_fraction),
                           FormatDurationS(shortest.window_s),
                           r.moving_budget ? "moving " : fmt::format("{} W ", Watts(r.budget_w)));
    for (const auto& w : r.windows) {
      if (&w != &shortest && std::abs(w.window_s - 30.0) < 1e-9) {
        headline += fmt::format(", {} of 30 s windows", Pct(w.violation_fraction));
      }
    }
    headline += fmt::format("; mean {} W, peak {} W over {}.", Number(r.mean_power_w, 1),
                            Number(r.peak_power_w, 1), FormatDurationS(r.duration_s));
  } else {
    headline = fmt::format("No budget given: mean {} W, peak {} W ({} of nameplate) over {}.",
                           Number(r.mean_power_w, 1), Number(r.peak_power_w, 1),
                           Pct(r.peak_fraction_of_nameplate), FormatDurationS(r.duration_s));
  }
  return Page("headroom analyze: " + info.path, HtmlEscape(headline), body);
}

std::string FleetReportHtml(const planning::FleetResult& r,
                            const std::vector<planning::Job>& jobs) {
  std::string body;
  body += fmt::format(
      "<p>{} GPUs in {} job trace(s), nameplate {} kW, {} trial(s) of {} s at dt {} s; budget "
      "{}.</p>\n",
      r.gpus, jobs.size(), Number(r.nameplate_w / 1e3, 1), r.trials, Number(r.duration_s, 1),
      Significant(r.dt_s, 3),
      r.budget_w ? fmt::format("{} kW", Number(*r.budget_w / 1e3, 1)) : std::string("none"));
  body += "<h2>Fleet power over time (first trial)</h2>\n";
  body += PowerChart(r.power, r.budget_w, r.nameplate_w, "fleet");

  body += "<h2>Peak as a fraction of nameplate, by window length</h2>\n";
  std::vector<double> xs, p50, p95, pmax, strip_x, strip_y;
  for (const auto& w : r.windows) {
    if (!w.peak_fraction_p50) continue;
    xs.push_back(w.window_s);
    p50.push_back(*w.peak_fraction_p50);
    p95.push_back(*w.peak_fraction_p95);
    pmax.push_back(*w.peak_fraction_max);
    for (size_t i = 0; i < w.peak_fractions.size(); ++i) {
      // Spread the trials of one window a little sideways (deterministic) so they can be seen.
      const double spread = 1.0 + 0.08 * (static_cast<double>(i % 9) / 8.0 - 0.5);
      strip_x.push_back(w.window_s * spread);
      strip_y.push_back(w.peak_fractions[i]);
    }
  }
  if (!xs.empty()) {
    const double top = std::max(1.0, *std::max_element(pmax.begin(), pmax.end())) * kHeadroom;
    const double x_lo = xs.front() * 0.8;
    const double x_hi = xs.back() > xs.front() ? xs.back() * 1.25 : xs.front() * 10.0;
    SvgChart chart(Axis{x_lo, x_hi, true, "window length (s)", 1.0},
                   Axis{0.0, top, false, "peak / nameplate (%)", 0.01});
    chart.Points(strip_x, strip_y, kPowerColor, "one trial");
    chart.Line(xs, p50, kMeanColor, "p50");
    chart.Line(xs, p95, kAccentColor, "p95");
    chart.Line(xs, pmax, kMaxColor, "max", /*dashed=*/true);
    chart.HorizontalRule(1.0, kNameplateColor, "nameplate");
    if (r.budget_w) chart.HorizontalRule(*r.budget_w / r.nameplate_w, kBudgetColor, "budget");
    body += chart.Render();
  }
  body += "<h2>Windows</h2>\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& w : r.windows) {
    rows.push_back({FormatDurationS(w.window_s), Pct(w.peak_fraction_p50), Pct(w.peak_fraction_p95),
                    Pct(w.peak_fraction_max), Pct(w.violation_fraction)});
  }
  body += HtmlTable({"window", "peak/nameplate p50", "p95", "max", "over budget"}, rows);
  std::vector<std::vector<std::string>> job_rows;
  for (const auto& job : jobs) {
    job_rows.push_back({job.name, std::to_string(job.copies), std::to_string(job.gpus),
                        Number(job.nameplate_w), Number(job.duration_s(), 1)});
  }
  body += "<h2>Jobs</h2>\n" +
          HtmlTable({"job", "copies", "GPUs", "nameplate W", "duration s"}, job_rows);
  body += "<h2>Summary</h2>\n" + HtmlTable({"metric", "value"}, FleetSummaryRows(r));
  const std::string headline = fmt::format(
      "Oversubscription factor {:.2f}x: a feed of these {} GPUs' nameplate ({} kW) can carry "
      "{:.2f} times as many, their q{:g} peak over {} windows being {} kW (margin {:g} %); "
      "{} kW of capacity freed.",
      r.oversubscription_factor, r.gpus, Number(r.nameplate_w / 1e3, 1), r.oversubscription_factor,
      r.quantile, FormatDurationS(r.risk_window_s), Number(r.risk_peak_w / 1e3, 1),
      r.margin * 100.0, Number(r.economics.freed_capacity_kw, 1));
  return Page("headroom fleet", HtmlEscape(headline), body);
}

}  // namespace headroom::report
