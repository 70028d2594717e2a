#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "common/phase.h"
#include "report/html.h"
#include "report/json.h"
#include "report/table.h"
#include "report_page/diloco_report.h"
#include "report_page/format.h"
#include "report_page/html_page.h"
#include "report_page/svg.h"
#include "site_sim/fleet_sim_report.h"
#include "trace/reader.h"

namespace headroom::report {
namespace {

// Numbers as people read them (issue 37): thousands grouped, never in scientific notation.
TEST(ReportNumbers, ThousandsGroupedAndNoScientificNotation) {
  EXPECT_EQ(Number(1276000.0), "1,276,000");
  EXPECT_EQ(Number(999.0), "999");
  EXPECT_EQ(Number(1000.0), "1,000");
  EXPECT_EQ(Number(-1234567.891, 2), "-1,234,567.89");
  EXPECT_EQ(Number(1234.5, 1), "1,234.5");
  EXPECT_EQ(Number(-0.001), "0");  // rounds to zero: no "-0"
  EXPECT_EQ(Number(std::nan("")), "-");
  EXPECT_EQ(Significant(1.2765e6), "1,276,500");
  EXPECT_EQ(Significant(1.433e-6), "0.000001433");
  EXPECT_EQ(Significant(0.012345), "0.01235");
  EXPECT_EQ(Significant(1.433e10), "14,330,000,000");
  EXPECT_EQ(Significant(0.0), "0");
}

// A chart: its data inside a frame and a clip path, its legend as HTML after it, tick labels
// grouped; a table in a scrolling box; the headline first.
TEST(ReportPage, ChartsFramedLegendsInHtmlTablesScrollHeadlineFirst) {
  SvgChart chart(Axis{0.0, 3.0e6, false, "tokens", 1.0}, Axis{0.0, 100.0, false, "W", 1.0});
  chart.Line({0.0, 3.0e6}, {10.0, 90.0}, "#123456", "a <line>");
  const std::string svg = chart.Render();
  EXPECT_THAT(svg, ::testing::HasSubstr("<rect class=\"frame\""));
  EXPECT_THAT(svg, ::testing::HasSubstr("<g class=\"data\" clip-path=\"url(#clip-"));
  EXPECT_THAT(svg, ::testing::HasSubstr(">1,000,000</text>"));
  EXPECT_THAT(svg, ::testing::Not(::testing::HasSubstr("e+06")));
  const size_t end = svg.find("</svg>");
  const size_t legend = svg.find("<div class=\"legend\">");
  ASSERT_NE(legend, std::string::npos);
  EXPECT_GT(legend, end);
  EXPECT_THAT(svg, ::testing::HasSubstr("a &lt;line&gt;</span>"));
  EXPECT_THAT(HtmlTable({"a"}, {{"1"}}), ::testing::StartsWith("<div class=\"scroll\"><table>"));
  const std::string page = Page("t", "the figure", "<p>body</p>");
  EXPECT_LT(page.find("<p class=\"headline\">the figure</p>"), page.find("<p>body</p>"));
}

using ::testing::HasSubstr;
using ::testing::Not;

analysis::AnalyzeResult SmallResult(bool plot_data) {
  analysis::AnalyzeOptions o;
  o.budget_w = 150.0;
  o.plot_data = plot_data;
  analysis::Analyzer analyzer(o);
  trace::MemorySource source("t_s,gpu,power_w\n0,0,100\n1,0,200\n2,0,100\n3,0,200\n");
  auto summary = trace::ReadTrace(source, "s.csv", {}, analyzer);
  EXPECT_TRUE(summary.ok());
  auto r = analyzer.Finish(summary->schema);
  EXPECT_TRUE(r.ok());
  return std::move(r).value();
}

TEST(AnalyzeJson, HasEveryKeyOfTheInterface) {
  const auto j = AnalyzeToJson(SmallResult(false), {"s.csv", "long", ""});
  for (const char* key :
       {"samples", "gpus", "duration_s", "scope", "budget_w", "energy_j", "mean_power_w",
        "peak_power_w", "gaps", "windows", "max_ramp_w_per_s", "tokens", "tokens_per_mwh",
        "nameplate_w", "peak_fraction_of_nameplate", "spectrum"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  for (const char* key :
       {"window_s", "windows_counted", "violation_fraction", "max_window_power_w"}) {
    EXPECT_TRUE(j["windows"][0].contains(key)) << key;
  }
  for (const char* key : {"band_hz", "band_fraction", "dominant_hz"}) {
    EXPECT_TRUE(j["spectrum"].contains(key)) << key;
  }
  EXPECT_TRUE(j["tokens"].is_null());
  EXPECT_TRUE(j["nameplate_w"].is_null());
  EXPECT_EQ(j["scope"], "gpu");
  EXPECT_EQ(j["samples"], 4);
  EXPECT_DOUBLE_EQ(j["windows"][0]["window_s"].get<double>(), 0.5);
}

TEST(FleetJson, HasEveryKeyOfTheInterface) {
  trace::CollectingSink::Series s{{0, 1, 2, 3}, {1, 2, 3, 4}, {}, {}};
  std::vector<planning::Job> jobs;
  jobs.push_back(std::move(planning::MakeJob("j.csv", 2, {s}, false, 10.0)).value());
  planning::FleetOptions o;
  o.windows_s = {1.0};
  o.risk_window_s = 1.0;
  o.trials = 3;
  auto r = planning::Compose(jobs, o);
  ASSERT_TRUE(r.ok());
  const auto j = FleetToJson(*r, jobs);
  for (const char* key :
       {"gpus", "nameplate_w", "trials", "windows", "oversubscription_factor", "economics"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  for (const char* key : {"window_s", "peak_fraction_p50", "peak_fraction_p95", "peak_fraction_max",
                          "violation_fraction"}) {
    EXPECT_TRUE(j["windows"][0].contains(key)) << key;
  }
  for (const char* key :
       {"freed_capacity_kw", "freed_capacity_usd_per_year", "energy_mwh", "energy_cost_usd",
        "carbon_kg", "usd_per_million_tokens", "carbon_kg_per_million_tokens"}) {
    EXPECT_TRUE(j["economics"].contains(key)) << key;
  }
  EXPECT_EQ(j["gpus"], 2);
  EXPECT_DOUBLE_EQ(j["nameplate_w"].get<double>(), 20.0);
}

TEST(Html, SelfContainedWithPlotsAndTables) {
  const std::string html = AnalyzeReportHtml(SmallResult(true), {"a<b>.csv", "long", ""});
  EXPECT_THAT(html, HasSubstr("<!DOCTYPE html>"));
  EXPECT_THAT(html, HasSubstr("<svg"));
  EXPECT_THAT(html, HasSubstr("Violations against window length"));
  EXPECT_THAT(html, HasSubstr("a&lt;b&gt;.csv"));
  EXPECT_THAT(html, Not(HasSubstr("<script")));
  EXPECT_THAT(html, Not(HasSubstr("src=\"http")));
  EXPECT_THAT(html, Not(HasSubstr("href=\"http")));
}

TEST(TextTable, AlignsColumns) {
  TextTable t({"name", "value"});
  t.AddRow({"a", "1"});
  t.AddRow({"long name", "12345"});
  EXPECT_EQ(t.Render(),
            "name       value\n"
            "---------  -----\n"
            "a              1\n"
            "long name  12345\n");
}

TEST(NiceTicks, StepsOfOneTwoFive) {
  EXPECT_EQ(NiceTicks(0, 10, false), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(NiceTicks(0.5, 100, true), (std::vector<double>{0.5, 1, 2, 5, 10, 20, 50, 100}));
}

}  // namespace
}  // namespace headroom::report

namespace headroom::report {
namespace {

TEST(FleetSimReport, TheTimelineShowsEachJobsPhasesAndItsHolds) {
  // Two jobs, 6 s: job a rolls out 2 s, is held 2 s (idle), trains 2 s; job b trains throughout.
  site_sim::FleetSimResult r;
  r.duration_s = 6;
  r.site_budget_w = 1000;
  r.nameplate_w = 1600;
  r.stagger = "greedy";
  r.site.hold_count = 1;
  r.site.hold_total_s = 2;
  r.site.jobs.resize(2);
  r.site.jobs[0].job = "a";
  r.site.jobs[1].job = "b";
  r.site.t_s = {1, 2, 3, 4, 5, 6};
  r.site.site_power_w = {500, 500, 300, 300, 600, 600};
  r.site.budget_w = std::vector<double>(6, 1000.0);
  r.site.grant_w = {std::vector<double>(6, 500.0), std::vector<double>(6, 500.0)};
  const auto p = [](Phase ph) { return static_cast<uint8_t>(ph); };
  r.site.phase = {{p(Phase::kRollout), p(Phase::kRollout), p(Phase::kIdle), p(Phase::kIdle),
                   p(Phase::kTrain), p(Phase::kTrain)},
                  std::vector<uint8_t>(6, p(Phase::kTrain))};
  const std::string html = site_sim::FleetSimReportHtml(r, 1);
  // One rectangle per run of a phase: a's rollout 0-2 s, its hold 2-4 s, its training 4-6 s;
  // b's training 0-6 s.
  EXPECT_NE(html.find("<title>a rollout: 0-2 s</title>"), std::string::npos) << html;
  EXPECT_NE(html.find("<title>a idle (held): 2-4 s</title>"), std::string::npos);
  EXPECT_NE(html.find("<title>a train: 4-6 s</title>"), std::string::npos);
  EXPECT_NE(html.find("<title>b train: 0-6 s</title>"), std::string::npos);
  EXPECT_NE(html.find("1 holds, 2 s held"), std::string::npos);
}

}  // namespace
}  // namespace headroom::report

TEST(DilocoReport, FiguresCurveWorkersAndChurn) {
  const nlohmann::json s = nlohmann::json::parse(R"({
    "run": "r<1>", "mode": "diloco", "workers": 4, "rounds": 3, "inner_steps": 10,
    "tokens": 30720, "final_val_loss": 2.5, "val_bits_per_byte": 3.6067, "bytes_sent_total": 123,
    "membership_changes": 2, "evictions": 1, "hashes_agreed": true, "overhead_fraction": 0.25,
    "energy_j": {"compute": 10, "network": 5, "idle": 10, "other_cpu": 5, "coordination": 20},
    "loss_curve": [{"tokens": 10240, "val_loss": 4.0}, {"tokens": 30720, "val_loss": 2.5}],
    "churn": {"killed": "worker-1", "killed_in_round": 1, "next_round_after_s": 4.5,
              "joined_in_round": 2},
    "wall_s": 12.5, "rounds_done_at_s": [3, 6.5, 9], "out": "/tmp/r",
    "workers_detail": [{"name": "worker-0", "bytes_sent": 123, "rounds_contributed": 3,
                        "resyncs": 0, "leaves": 0,
                        "seconds": {"wall": 10, "compute": 7.5, "communicate": 1,
                                    "wait": 1.5, "recover": 0, "throttled": 0}}]})");
  const auto summary = headroom::diloco::RunSummaryFromJson(s, "summary.json");
  ASSERT_TRUE(summary.ok()) << summary.error().message();
  const std::string html = headroom::report::DilocoReportHtml(*summary);
  EXPECT_THAT(html, ::testing::HasSubstr("r&lt;1&gt;"));  // escaped
  EXPECT_THAT(html, ::testing::HasSubstr("2.5000"));
  EXPECT_THAT(html, ::testing::HasSubstr("25.0 %"));
  EXPECT_THAT(html, ::testing::HasSubstr("worker-1 SIGKILLed in round 1"));
  EXPECT_THAT(html, ::testing::HasSubstr("7.5 s (75 %)"));
  EXPECT_THAT(html, ::testing::HasSubstr("5 J network, 10 J idle while waiting"));
  EXPECT_THAT(html, ::testing::HasSubstr("coordination 66.7 % of 30 J"));
  EXPECT_THAT(html, ::testing::HasSubstr("<svg"));
  EXPECT_THAT(html, ::testing::Not(::testing::HasSubstr("<script")));
}
