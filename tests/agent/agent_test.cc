#include "agent/agent.h"
#include "agent/api.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "agent/api_server.h"
#include "agent/guard.h"
#include "agent/recorder.h"
#include "agent/runner.h"
#include "build_info/build_info.h"
#include "control/baselines.h"
#include "trace/meta.h"
#include "trace/reader.h"

namespace headroom::agent {
namespace {

using ::testing::HasSubstr;

// Records what it was given; asks for a concurrency that follows the power.
class Probe final : public control::Controller {
 public:
  std::string_view name() const override { return "probe"; }
  control::Command Decide(const control::Inputs& in) override {
    last = in;
    return {in.JobPowerW() > in.budget_w ? 2 : 8, 6, {}};
  }
  control::Inputs last;
};

AgentConfig Config() {
  AgentConfig c;
  c.budget_w = 300.0;
  c.limits.concurrency = {1, 16};
  c.limits.group_size = {4, 16};
  c.safe_concurrency = 1;
  c.safe_group_size = 4;
  c.stale_after_s = 1.5;
  c.report_timeout_s = 10.0;
  return c;
}

TrainerReport Rep(int step, control::Phase phase, double tokens, int in_flight, double progress,
                  std::optional<int> group_size) {
  TrainerReport r;
  r.step = step;
  r.phase = phase;
  r.tokens = tokens;
  r.in_flight = in_flight;
  r.progress = progress;
  r.group_size = group_size;
  return r;
}

telemetry::Sample At(double t_s, std::vector<double> power) {
  telemetry::Sample s;
  s.t_s = t_s;
  for (double p : power) s.gpus.push_back({p, false, {}, {}, {}, {}});
  return s;
}

// An agent core and what its runner shares with the server, on a clock the test moves.
struct Served {
  Served() {
    shared.agent = &core;
    shared.now_s = [this] { return now.load(); };
  }
  Probe probe;
  Agent core{Config(), probe};
  Shared shared;
  std::atomic<double> now{0.0};
};

TEST(Agent, DecidesOnPowerAndReportsPhase) {
  Probe probe;
  AgentConfig config = Config();
  config.group_size_rule.min_steps = 0;  // group size moves at any decision, as eval's
  Agent a(config, probe);
  EXPECT_EQ(a.actuation().concurrency, 1);  // safe until the first decision
  const uint64_t seq0 = a.actuation().seq;
  // No report: on power alone, as if in rollout. Job power = mean over GPUs = 250 W.
  a.Tick(0.0, At(0.0, {200.0, 300.0}));
  EXPECT_EQ(probe.last.phase, control::Phase::kRollout);
  EXPECT_DOUBLE_EQ(probe.last.JobPowerW(), 250.0);
  EXPECT_EQ(a.actuation().concurrency, 2);  // rises at most x2 from the safe 1
  EXPECT_EQ(a.actuation().group_size, 6);
  EXPECT_THAT(a.actuation().reason, HasSubstr("on power alone"));
  EXPECT_GT(a.actuation().seq, seq0);
  // A report: its phase and step reach the controller.
  a.Report(Rep(7, control::Phase::kTrain, 1000.0, 0, 1.0, std::nullopt), 0.2);
  a.Tick(0.5, At(0.5, {200.0, 300.0}));
  EXPECT_EQ(probe.last.phase, control::Phase::kTrain);
  EXPECT_EQ(probe.last.step, 7);
  EXPECT_EQ(a.actuation().concurrency, 4);
  EXPECT_THAT(a.actuation().reason, HasSubstr("probe: train at step 7"));
  // Without the trainer's group size, the agent's own last decision (6) stands for it; with it,
  // the group size in force reaches the controller while the decision (6) waits for the step.
  EXPECT_EQ(probe.last.group_size, 6);
  a.Report(Rep(7, control::Phase::kRollout, 1000.0, 0, 0.5, 12), 0.6);
  a.Tick(0.75, At(0.75, {200.0, 300.0}));
  EXPECT_EQ(probe.last.group_size, 12);
  EXPECT_EQ(probe.last.next_group_size, 6);
  EXPECT_DOUBLE_EQ(probe.last.rollout_progress, 0.5);
  // Over budget: down at once.
  a.Tick(1.0, At(1.0, {320.0, 330.0}));
  EXPECT_EQ(a.actuation().concurrency, 2);
  // Silent past the report timeout (10 s here): taken as gone, the safe actuation.
  a.Tick(11.0, At(11.0, {100.0, 100.0}));
  EXPECT_EQ(a.actuation().concurrency, 1);
  EXPECT_THAT(a.actuation().reason, HasSubstr("safe: the trainer has not reported"));
}

// Proposes the group size the test sets; concurrency 4.
class GroupProbe final : public control::Controller {
 public:
  std::string_view name() const override { return "group-probe"; }
  control::Command Decide(const control::Inputs&) override { return {4, group, {}}; }
  int group = 4;
};

TEST(Agent, GroupSizeChangesOnlyAtAKnownStepAmongTheChoicesAtMostOnceEveryKSteps) {
  GroupProbe probe;
  AgentConfig config = Config();
  config.group_size_rule = {{4, 8, 16}, 3};
  Agent a(config, probe);
  double t = 0.0;
  const auto tick = [&] {
    t += 0.5;
    return a.Tick(t, At(t, {100.0, 100.0})).group_size;
  };
  const auto at_step = [&](int step) {
    a.Report(Rep(step, control::Phase::kRollout, 0.0, 0, 0.0, std::nullopt), t);
  };
  EXPECT_EQ(a.actuation().group_size, 4);
  probe.group = 16;
  EXPECT_EQ(tick(), 4);  // no report: the trainer's step is unknown, nothing changes
  at_step(1);
  EXPECT_EQ(tick(), 16);  // decided during step 1, for step 2
  EXPECT_EQ(a.Status(t).group_size_changed_at_step, 1);
  probe.group = 8;
  EXPECT_EQ(tick(), 16);  // the same step: no second change
  at_step(2);
  EXPECT_EQ(tick(), 16);
  at_step(3);
  EXPECT_EQ(tick(), 16);  // 3 - 1 < 3 steps
  at_step(4);
  EXPECT_EQ(tick(), 8);  // 4 - 1 = 3 steps after the last change
  probe.group = 6;       // between 4 and 8: the lower on a tie
  at_step(7);
  EXPECT_EQ(tick(), 4);
  probe.group = 13;  // nearest: 16
  at_step(9);
  EXPECT_EQ(tick(), 4);  // 9 - 7 < 3
  at_step(10);
  EXPECT_EQ(tick(), 16);
  EXPECT_EQ(a.Status(t).group_size_changes, 4);
  // Telemetry lost: concurrency to the safe 1 at once; group size to the safe 4 only as the
  // step rules allow (a trainer takes it at a boundary in any case).
  at_step(11);
  t += 0.5;
  EXPECT_EQ(a.Tick(t, Error::Io("nvml gone")).concurrency, 1);
  EXPECT_EQ(a.actuation().group_size, 16);
  at_step(13);
  t += 0.5;
  EXPECT_EQ(a.Tick(t, Error::Io("nvml gone")).group_size, 4);
}

TEST(Agent, OneGroupSizeChoiceFixesIt) {
  GroupProbe probe;
  AgentConfig config = Config();
  config.safe_group_size = 8;
  config.group_size_rule = {{8}, 1};
  Agent a(config, probe);
  double t = 0.0;
  for (int step = 0; step < 50; ++step) {
    probe.group = 4 + (step % 3) * 6;  // 4, 10, 16, ...
    a.Report(Rep(step, control::Phase::kRollout, 0.0, 0, 0.0, std::nullopt), t);
    t += 0.5;
    EXPECT_EQ(a.Tick(t, At(t, {100.0, 100.0})).group_size, 8);
  }
  EXPECT_EQ(a.Status(t).group_size_changes, 0);
}

TEST(GroupSizeGate, KStepsCountFromTheStepTheTrainerReportsTheChangeInForce) {
  GroupSizeGate gate({{4, 8, 16}, 3});
  EXPECT_EQ(gate.Decide(4, 16, 1), 16);  // decided during step 1: in force from 2 at best
  gate.Confirm(2, 4);                    // the trainer read it late: step 2 still ran 4
  gate.Confirm(3, 16);                   // in force from step 3
  EXPECT_EQ(gate.Decide(16, 8, 4), 16);  // 4 + 1 - 3 < 3
  EXPECT_EQ(gate.Decide(16, 8, 5), 8);   // in force from 6 at best: 3 steps after 3
  // Unconfirmed, counted from the step after the decision: 5 + 1 = 6.
  EXPECT_EQ(gate.Decide(8, 4, 7), 8);
  EXPECT_EQ(gate.Decide(8, 4, 8), 4);
  gate.Confirm(7, 4);  // a report from before the decision is not a confirmation
  EXPECT_EQ(gate.Decide(4, 16, 10), 4);
  EXPECT_EQ(gate.Decide(4, 16, 11), 16);
}

// Issue 53, item 10: a trainer restarted from a checkpoint reports lower steps. Once they are K or
// more below the last change's step, the change counts from the step it went back to, so the
// next comes K steps later (before: not until the trainer passed the old step numbers again, 90
// steps here).
TEST(GroupSizeGate, AStepGoingBackCountsTheKStepsFromThere) {
  GroupSizeGate gate({{4, 8, 16}, 3});
  EXPECT_EQ(gate.Decide(4, 16, 100), 16);  // in force from 101 at best
  gate.Confirm(101, 16);
  EXPECT_EQ(gate.Decide(16, 8, 102), 16);  // 102 + 1 - 101 < 3
  gate.Confirm(10, 16);                    // restarted at step 10
  EXPECT_EQ(gate.Decide(16, 8, 10), 16);   // 10 + 1 - 10 < 3
  EXPECT_EQ(gate.Decide(16, 8, 11), 16);
  EXPECT_EQ(gate.Decide(16, 8, 12), 8);  // 3 steps at 16 since the restart: 10, 11, 12
  EXPECT_EQ(gate.changed_at_step(), 12);
  // Going back before any report confirmed the change: the same, from the step decided at.
  GroupSizeGate unconfirmed({{4, 8, 16}, 3});
  EXPECT_EQ(unconfirmed.Decide(4, 16, 50), 16);
  EXPECT_EQ(unconfirmed.Decide(16, 8, 5), 16);
  EXPECT_EQ(unconfirmed.Decide(16, 8, 6), 16);
  EXPECT_EQ(unconfirmed.Decide(16, 8, 7), 8);
  // A report that lagged, fewer than K steps below the change's step, is no restart: the count
  // stays from the step after the decision.
  GroupSizeGate late({{4, 8, 16}, 3});
  EXPECT_EQ(late.Decide(4, 16, 20), 16);
  late.Confirm(18, 4);
  EXPECT_EQ(late.Decide(16, 8, 22), 16);  // 22 + 1 - 21 < 3 (from 18 it would be 5)
  EXPECT_EQ(late.Decide(16, 8, 23), 8);
}

TEST(GroupSizeGate, WithoutStepRulesItChangesAtOnceEvenWithNoStepKnown) {
  GroupSizeGate gate({{4, 8, 16}, 0});
  EXPECT_EQ(gate.Decide(4, 16, std::nullopt), 16);  // no report: allowed, nothing to record
  EXPECT_FALSE(gate.changed_at_step().has_value());
  EXPECT_EQ(gate.Decide(16, 5, 2), 4);
  EXPECT_EQ(gate.Decide(4, 8, 2), 8);  // the same step again: no step rule
  EXPECT_EQ(gate.changed_at_step(), 2);
  EXPECT_EQ(gate.changes(), 3);
}

TEST(GroupSizeChoices, ParsedSortedAndEveryBadEntryNamed) {
  std::vector<int> c;
  EXPECT_EQ(ParseGroupSizeChoices("16,4,8", &c), "");
  EXPECT_EQ(c, (std::vector<int>{4, 8, 16}));
  for (const char* bad : {"", "4,,8", "0", "x", "4,8,", "8.5", "5000", "-4", " 4"}) {
    std::vector<int> out = {99};
    const std::string why = ParseGroupSizeChoices(bad, &out);
    EXPECT_THAT(why, HasSubstr("--group-size-choices")) << bad;
    EXPECT_EQ(out, (std::vector<int>{99})) << bad;  // untouched
  }
  EXPECT_THAT(ParseGroupSizeChoices("4,8,4", &c), HasSubstr("twice"));
}

TEST(Agent, DecisionLatencyQuantilesAreNearestRankOverTheLastDecisions) {
  Probe probe;
  Agent a(Config(), probe);
  EXPECT_EQ(a.Status(0.0).decision_p99_s, 0.0);  // none yet
  // 1..100 ms, shuffled: nearest rank p50 = the 50th smallest, p99 = the 99th.
  for (int i = 0; i < 100; ++i) a.RecordDecisionLatency(((i * 37) % 100 + 1) * 1e-3);
  AgentStatus s = a.Status(0.0);
  EXPECT_DOUBLE_EQ(s.decision_p50_s, 50e-3);
  EXPECT_DOUBLE_EQ(s.decision_p99_s, 99e-3);
  EXPECT_DOUBLE_EQ(s.decision_max_s, 100e-3);
  EXPECT_EQ(s.latency_samples, 100u);
  EXPECT_NEAR(s.latency_sum_s, 5.050, 1e-12);  // 1 + ... + 100 ms
  // Only the last kLatencyKeep count: after that many 1 us decisions the old ones are gone.
  for (size_t i = 0; i < kLatencyKeep; ++i) a.RecordDecisionLatency(1e-6);
  s = a.Status(0.0);
  EXPECT_DOUBLE_EQ(s.decision_max_s, 1e-6);
  EXPECT_EQ(s.latency_samples, 100u + kLatencyKeep);
}

TEST(Agent, HistoryKeepsTheLastFiveMinutesOfDecisions) {
  Probe probe;
  Agent a(Config(), probe);
  a.Tick(0.0, At(0.0, {100.0, 200.0}));
  a.Tick(0.5, Error::Io("gone"));
  a.Tick(1.0, At(1.0, {400.0, 400.0}));
  std::vector<HistoryPoint> h = a.History(-1.0);
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0].t_s, 0.0);
  EXPECT_EQ(h[0].power_w, (std::vector<double>{100.0, 200.0}));
  EXPECT_EQ(h[0].concurrency, 2);     // the probe asks 8; x2 from the safe 1
  EXPECT_TRUE(h[1].power_w.empty());  // the failed read: no power, the safe actuation
  EXPECT_EQ(h[1].concurrency, 1);
  EXPECT_EQ(h[2].power_w, (std::vector<double>{400.0, 400.0}));
  EXPECT_EQ(h[2].concurrency, 2);  // over the 300 W budget the probe asks 2: allowed from 1
  h = a.History(0.5);              // strictly after
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].t_s, 1.0);
  EXPECT_TRUE(a.History(1.0).empty());
  // Only the last kHistoryKeep stay.
  for (size_t k = 3; k < kHistoryKeep + 10; ++k) {
    a.Tick(0.5 * static_cast<double>(k), At(0.5 * static_cast<double>(k), {100.0, 100.0}));
  }
  h = a.History(-1.0);
  ASSERT_EQ(h.size(), kHistoryKeep);
  EXPECT_EQ(h.front().t_s, 0.5 * 10);
  EXPECT_EQ(h.back().t_s, 0.5 * static_cast<double>(kHistoryKeep + 9));
}

TEST(Agent, FailingStaleOrPowerlessTelemetryMeansSafeValuesAtOnce) {
  Probe probe;
  Agent a(Config(), probe);
  a.Tick(0.0, At(0.0, {100.0}));
  a.Tick(0.5, At(0.5, {100.0}));
  ASSERT_EQ(a.actuation().concurrency, 4);
  a.Tick(1.0, Error::Io("nvml: GPU 0: cannot read power: GPU is lost"));
  EXPECT_EQ(a.actuation().concurrency, 1);
  EXPECT_EQ(a.actuation().group_size, 4);
  EXPECT_THAT(a.actuation().reason, HasSubstr("safe: nvml: GPU 0: cannot read power"));
  a.Tick(1.5, At(1.5, {100.0}));
  EXPECT_EQ(a.actuation().concurrency, 2);  // recovers, rate-limited from safe
  a.Tick(4.0, At(2.0, {100.0}));            // a sample 2 s old (> 1.5)
  EXPECT_EQ(a.actuation().concurrency, 1);
  EXPECT_THAT(a.actuation().reason, HasSubstr("telemetry is 2.0 s old"));
  telemetry::Sample no_power = At(4.5, {100.0});
  no_power.gpus[0].power_w.reset();
  a.Tick(4.5, no_power);
  EXPECT_EQ(a.actuation().concurrency, 1);
  const AgentStatus s = a.Status(4.5);
  EXPECT_EQ(s.telemetry_errors, 3u);
  EXPECT_EQ(s.decisions, 6u);
}

TEST(Agent, ViolationFractionsOnTheJobPowerItSaw) {
  Probe probe;
  Agent a(Config(), probe);
  // 0.5 s windows: 310, 290, 320, 280 W -> windows at 0, 0.5, 1.0 decided (the last is open).
  const double w[] = {310.0, 290.0, 320.0, 280.0};
  for (int i = 0; i < 4; ++i) a.Tick(0.5 * i, At(0.5 * i, {w[i]}));
  const AgentStatus s = a.Status(1.5);
  EXPECT_EQ(s.windows[0], 3u);
  ASSERT_TRUE(s.violation_fraction[0].has_value());
  EXPECT_NEAR(*s.violation_fraction[0], 2.0 / 3.0, 1e-12);
  // No 30 s or 5 min window has closed: no fraction yet (not a false 0).
  EXPECT_EQ(s.windows[1], 0u);
  EXPECT_FALSE(s.violation_fraction[1].has_value());
  EXPECT_FALSE(s.violation_fraction[2].has_value());
  const auto j = nlohmann::json::parse(StatusJson(s));
  EXPECT_TRUE(j["violation_fraction"]["30s"].is_null());
  EXPECT_THAT(MetricsText(s), HasSubstr("headroom_violation_fraction{window=\"5min\"} NaN"));
}

// Prometheus text -> {"name{labels}": value}; every sample's family has a # TYPE before it.
std::map<std::string, double> ParseMetrics(const std::string& text,
                                           std::map<std::string, std::string>* types) {
  std::map<std::string, double> samples;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("# HELP ")) continue;
    if (line.starts_with("# TYPE ")) {
      const std::string rest = line.substr(7);
      const size_t space = rest.find(' ');
      EXPECT_NE(space, std::string::npos) << line;
      (*types)[rest.substr(0, space)] = rest.substr(space + 1);
      continue;
    }
    const size_t space = line.rfind(' ');
    EXPECT_NE(space, std::string::npos) << line;
    if (space == std::string::npos) continue;
    const std::string key = line.substr(0, space);
    std::string family = key.substr(0, key.find('{'));
    for (const std::string suffix : {"_sum", "_count"}) {
      if (!types->contains(family) && family.ends_with(suffix)) {
        family.resize(family.size() - suffix.size());
      }
    }
    EXPECT_TRUE(types->contains(family)) << "no # TYPE before: " << line;
    const std::string value = line.substr(space + 1);
    samples[key] = value == "NaN" ? std::nan("") : std::stod(value);
  }
  return samples;
}

// Always the lowest concurrency and group size its ranges allow: a controller at its floor.
class Lowest final : public control::Controller {
 public:
  std::string_view name() const override { return "lowest"; }
  control::Command Decide(const control::Inputs&) override { return {1, 4, {}}; }
};

TEST(Agent, MetricsForAlertsCountWindowsReportsAndTheFloor) {
  Lowest lowest;
  AgentConfig config = Config();
  config.floor_w = 250.0;
  Agent a(config, lowest);
  std::map<std::string, std::string> types;
  auto m = ParseMetrics(MetricsText(a.Status(0.0)), &types);
  EXPECT_EQ(m.at("headroom_trainer_reports_total"), 0.0);
  EXPECT_TRUE(std::isnan(m.at("headroom_trainer_last_report_age_seconds")));  // never reported
  EXPECT_EQ(m.at("headroom_windows_total{window=\"0.5s\"}"), 0.0);
  EXPECT_FALSE(m.contains("headroom_site_fenced"));   // not in a site: no site metrics
  EXPECT_FALSE(m.contains("headroom_fleet_fenced"));  // nor their deprecated names

  // 65 s at 0.5 s: 30 s over the 300 W budget, 30 s under, 5 s over. Counted by hand: the
  // 0.5 s windows are the samples but the last (still open): 129 closed, 60 + 9 over; the 30 s
  // windows [0, 30) at 320 W (over) and [30, 60) at 280 W (not), [60, 65) open.
  for (int i = 0; i < 130; ++i) {
    const double t = 0.5 * i;
    const double w = i < 60 ? 320.0 : (i < 120 ? 280.0 : 320.0);
    a.Tick(t, At(t, {w, w}));
    if (i == 20) a.Report(Rep(1, control::Phase::kRollout, 10.0, 4, 0.0, std::nullopt), t);
    if (i == 40) a.Report(Rep(1, control::Phase::kTrain, 20.0, 0, 0.0, std::nullopt), t);
  }
  m = ParseMetrics(MetricsText(a.Status(64.5)), &types);
  EXPECT_EQ(m.at("headroom_windows_total{window=\"0.5s\"}"), 129.0);
  EXPECT_EQ(m.at("headroom_windows_over_budget_total{window=\"0.5s\"}"), 69.0);
  EXPECT_EQ(m.at("headroom_windows_total{window=\"30s\"}"), 2.0);
  EXPECT_EQ(m.at("headroom_windows_over_budget_total{window=\"30s\"}"), 1.0);
  EXPECT_EQ(m.at("headroom_windows_total{window=\"5min\"}"), 0.0);
  EXPECT_EQ(m.at("headroom_windows_over_budget_total{window=\"5min\"}"), 0.0);
  // The fraction the gauge shows is the counters' ratio.
  EXPECT_NEAR(m.at("headroom_violation_fraction{window=\"0.5s\"}"), 69.0 / 129.0, 1e-12);
  EXPECT_EQ(m.at("headroom_trainer_reports_total"), 2.0);
  EXPECT_DOUBLE_EQ(m.at("headroom_trainer_last_report_age_seconds"), 64.5 - 20.0);
  EXPECT_EQ(m.at("headroom_concurrency_at_minimum"), 1.0);  // concurrency 1 of [1, 16]
  EXPECT_EQ(m.at("headroom_budget_below_floor"), 0.0);      // 300 W over a 250 W floor
  a.SetBudget(200.0, "test");
  m = ParseMetrics(MetricsText(a.Status(64.5)), &types);
  EXPECT_EQ(m.at("headroom_budget_below_floor"), 1.0);  // 200 W under the 250 W floor
  for (const char* counter : {"headroom_windows_total", "headroom_windows_over_budget_total",
                              "headroom_trainer_reports_total"}) {
    EXPECT_EQ(types.at(counter), "counter") << counter;
  }
  for (const char* gauge : {"headroom_concurrency_at_minimum", "headroom_budget_below_floor",
                            "headroom_trainer_last_report_age_seconds"}) {
    EXPECT_EQ(types.at(gauge), "gauge") << gauge;
  }

  // Above its minimum the gauge says 0.
  Probe probe;
  Agent b(Config(), probe);
  b.Tick(0.0, At(0.0, {100.0}));  // under budget: the probe asks 8, x2 from 1 gives 2
  EXPECT_EQ(ParseMetrics(MetricsText(b.Status(0.0)), &types).at("headroom_concurrency_at_minimum"),
            0.0);
}

TEST(Api, MetricsCarryTheSiteMembersHealth) {
  Served served;
  int calls = 0;
  served.shared.site_health = [&calls] {
    ++calls;
    SiteHealth h;
    h.site = "hall-a";
    h.job = "grpo-7b";
    h.state = "fenced";
    h.job_budget_w = 1600.0;
    h.lease = 0x2a;
    h.term = 7;
    h.fenced = true;
    h.fences = 3;
    h.leases_lost = 2;
    h.grants_watched = 5;
    return h;
  };
  Api api(served.shared, ApiConfig{});
  net::Request request;
  request.method = "GET";
  request.target = "/metrics";
  request.host = "127.0.0.1:10470";
  const net::Response r = api.Handle(request);
  ASSERT_EQ(r.status, 200);
  std::map<std::string, std::string> types;
  const auto m = ParseMetrics(r.body, &types);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(m.at("headroom_site_fenced"), 1.0);
  EXPECT_EQ(m.at("headroom_site_fences_total"), 3.0);
  EXPECT_EQ(m.at("headroom_site_lease_lost_total"), 2.0);
  EXPECT_EQ(m.at("headroom_site_grants_watched_total"), 5.0);
  EXPECT_EQ(types.at("headroom_site_fenced"), "gauge");
  EXPECT_EQ(types.at("headroom_site_fences_total"), "counter");
  EXPECT_EQ(types.at("headroom_site_lease_lost_total"), "counter");
  EXPECT_EQ(types.at("headroom_site_grants_watched_total"), "counter");
  // The names of the previous release, kept one more (CHANGELOG.md, "Renamed"): the same values
  // and types, each said deprecated.
  for (const char* suffix :
       {"fenced", "fences_total", "lease_lost_total", "grants_watched_total"}) {
    const std::string site = std::string("headroom_site_") + suffix;
    const std::string old = std::string("headroom_fleet_") + suffix;
    EXPECT_EQ(m.at(old), m.at(site)) << old;
    EXPECT_EQ(types.at(old), types.at(site)) << old;
    EXPECT_NE(r.body.find("# HELP " + old + " Deprecated: renamed " + site +
                          ", removed in the next release.\n"),
              std::string::npos)
        << old;
  }
  // /v1/status: the site card, as the dashboard shows it.
  request.target = "/v1/status";
  const auto j = nlohmann::json::parse(api.Handle(request).body);
  EXPECT_EQ(j["site"]["site"], "hall-a");
  EXPECT_EQ(j["site"]["job"], "grpo-7b");
  EXPECT_EQ(j["site"]["state"], "fenced");
  EXPECT_EQ(j["site"]["job_budget_w"], 1600.0);
  EXPECT_EQ(j["site"]["lease"], "2a");
  EXPECT_EQ(j["site"]["term"], 7);
  EXPECT_EQ(calls, 2);
}

// Issue 37: the power limit in force on each GPU (the telemetry's enforced limit) is in
// /v1/status, /v1/history and /metrics; the history also carries each decision's wall-clock
// time and the trainer's phase. Not in a site: "site" is null.
TEST(Api, ThePowerLimitInForcePhaseAndWallClockAreServed) {
  Served served;
  telemetry::Sample s0 = At(0.0, {250.0, 260.0});
  s0.gpus[0].power_limit_w = 300.0;  // GPU 1's source does not say
  served.core.Tick(0.0, s0, 1796521803.25);
  TrainerReport report;
  report.step = 3;
  report.phase = control::Phase::kTrain;
  served.core.Report(report, 0.25);
  telemetry::Sample s1 = At(0.5, {280.0, 290.0});
  s1.gpus[0].power_limit_w = 275.0;
  s1.gpus[1].power_limit_w = 400.0;
  served.core.Tick(0.5, s1, 1796521803.75);
  served.core.Tick(1.0, Result<telemetry::Sample>(Error::Io("gone")), 1796521804.25);
  served.now = 1.0;
  Api api(served.shared, ApiConfig{});
  net::Request request;
  request.method = "GET";
  request.host = "127.0.0.1:10470";
  request.target = "/v1/history";
  const auto h = nlohmann::json::parse(api.Handle(request).body);
  ASSERT_EQ(h["points"].size(), 3u);
  const auto& p0 = h["points"][0];
  EXPECT_EQ(p0["power_limit_w"], nlohmann::json::parse("[300.0, null]"));
  EXPECT_EQ(p0["unix_s"], 1796521803.25);
  EXPECT_TRUE(p0["phase"].is_null());  // no report yet
  const auto& p1 = h["points"][1];
  EXPECT_EQ(p1["power_limit_w"], nlohmann::json::parse("[275.0, 400.0]"));
  EXPECT_EQ(p1["phase"], "train");
  EXPECT_EQ(p1["unix_s"], 1796521803.75);
  const auto& p2 = h["points"][2];  // telemetry failed: no power, no limit
  EXPECT_TRUE(p2["power_w"].is_null());
  EXPECT_TRUE(p2["power_limit_w"].is_null());
  request.target = "/v1/status";
  const auto st = nlohmann::json::parse(api.Handle(request).body);
  EXPECT_EQ(st["power_limit_w"], nlohmann::json::parse("[275.0, 400.0]"));  // the last good
  EXPECT_TRUE(st["site"].is_null());
  EXPECT_TRUE(st["actuation"].contains("power_limit_w"));
  request.target = "/metrics";
  std::map<std::string, std::string> types;
  const auto m = ParseMetrics(api.Handle(request).body, &types);
  EXPECT_EQ(m.at("headroom_power_limit_watts{gpu=\"0\"}"), 275.0);
  EXPECT_EQ(m.at("headroom_power_limit_watts{gpu=\"1\"}"), 400.0);
  EXPECT_EQ(types.at("headroom_power_limit_watts"), "gauge");
}

TEST(Agent, ABudgetSetNowIsTheBudgetOfTheVeryNextDecision) {
  Probe probe;
  AgentConfig config = Config();
  config.floor_w = 120.0;
  Agent a(config, probe);
  a.Tick(0.0, At(0.0, {250.0}));
  EXPECT_EQ(probe.last.budget_w, 300.0);
  a.Tick(0.25, At(0.25, {250.0}));
  EXPECT_EQ(a.actuation().concurrency, 4);  // under 300 W: rising, x2 a decision
  a.SetBudget(200.0, "test");
  a.Tick(0.5, At(0.5, {250.0}));
  EXPECT_EQ(probe.last.budget_w, 200.0);
  EXPECT_EQ(a.actuation().concurrency, 2);  // over 200 W: the Probe backs off at once
  EXPECT_EQ(a.Status(0.5).budget_w, 200.0);
  EXPECT_EQ(a.Status(0.5).budget_from, "test");
  EXPECT_EQ(a.History(-1.0).back().budget_w, 200.0);
  EXPECT_EQ(a.History(-1.0).front().budget_w, 300.0);
  EXPECT_EQ(a.actuation().reason.find("floor"), std::string::npos);
  a.SetBudget(100.0, "test");  // below the floor: taken, and the reason says so
  a.Tick(1.0, At(1.0, {250.0}));
  EXPECT_EQ(probe.last.budget_w, 100.0);
  EXPECT_THAT(a.actuation().reason, HasSubstr("below the job's floor 120.0 W per GPU"));
}

TEST(Agent, ViolationsAreScoredAgainstTheBudgetInForceInEachWindow) {
  Probe probe;
  Agent a(Config(), probe);
  // 0.5 s windows, one sample each: 280 W under 300 (no), 280 W under 250 (yes), 240 under 250.
  a.Tick(0.0, At(0.0, {280.0}));
  a.SetBudget(250.0, "test");
  a.Tick(0.5, At(0.5, {280.0}));
  a.Tick(1.0, At(1.0, {240.0}));
  a.Tick(1.5, At(1.5, {240.0}));
  const AgentStatus s = a.Status(1.5);
  ASSERT_EQ(s.windows[0], 3u);
  EXPECT_NEAR(*s.violation_fraction[0], 1.0 / 3.0, 1e-12);
}

TEST(Guard, SetsTheBudgetAfterSustainedExcessAndRestoresTheOriginals) {
  std::vector<std::pair<int, double>> calls;
  PowerLimitGuard guard(
      [&](int gpu, double w) -> Status {
        calls.emplace_back(gpu, w);
        return OkStatus();
      },
      300.0, /*sustain=*/3, /*margin=*/0.02);
  std::vector<std::string> log;
  auto sample = [](double p, std::optional<double> limit1) {
    telemetry::Sample s = At(0.0, {p, p});
    s.gpus[0].power_limit_w = 400.0;
    s.gpus[1].power_limit_w = limit1;
    return s;
  };
  auto logger = [&](const std::string& l) { log.push_back(l); };
  guard.Observe(sample(310.0, 350.0), logger);  // over 306: 1
  guard.Observe(sample(305.0, 350.0), logger);  // under: reset
  guard.Observe(sample(310.0, 350.0), logger);
  guard.Observe(sample(310.0, 350.0), logger);
  EXPECT_FALSE(guard.engaged());
  guard.Observe(sample(310.0, 350.0), logger);  // third in a row
  ASSERT_TRUE(guard.engaged());
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0], std::make_pair(0, 300.0));
  EXPECT_EQ(calls[1], std::make_pair(1, 300.0));
  guard.Observe(sample(330.0, 350.0), logger);  // once only
  EXPECT_EQ(calls.size(), 2u);
  ASSERT_TRUE(guard.Restore(logger).ok());
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(calls[2], std::make_pair(0, 400.0));  // the limits read before the change
  EXPECT_EQ(calls[3], std::make_pair(1, 350.0));
  EXPECT_THAT(log.back(), HasSubstr("GPU 1: power limit restored to 350 W"));
}

// Hybrid actuation in the agent: a PID given the power limit's range holds an update above the
// budget with the limit; the actuation carries it (and its change is a new decision), and the
// controller sees the limit in force.
TEST(Agent, AHybridControllersPowerLimitIsInTheActuation) {
  AgentConfig config = Config();
  config.limits.nameplate_w = 400.0;
  config.limits.power_limit_min_w = 100.0;
  control::Pid pid({2.0, 1.0, 0.0, {}}, config.limits.concurrency, 8, 8, 400.0, 100.0);
  Agent a(config, pid);
  a.Report(Rep(3, control::Phase::kTrain, 0.0, 0, 1.0, std::nullopt), 0.0);
  a.Tick(0.0, At(0.0, {380.0}));
  const double limit_w = a.actuation().power_limit_w;
  EXPECT_GT(limit_w, 100.0);
  EXPECT_LT(limit_w, 300.0);
  const uint64_t seq = a.actuation().seq;
  a.Report(Rep(3, control::Phase::kRollout, 0.0, 0, 0.1, std::nullopt), 0.4);
  a.Tick(0.5, At(0.5, {250.0}));  // rollout: concurrency has authority, the limit is lifted
  EXPECT_EQ(a.actuation().power_limit_w, 0.0);
  EXPECT_GT(a.actuation().seq, seq);
}

TEST(Guard, FollowsTheControllersLimitPersistingFirstAndTheBackstopWinsWhenLower) {
  std::vector<std::string> events;
  const auto set = [&](int gpu, double w) -> Status {
    events.push_back(fmt::format("set {} {}", gpu, w));
    return OkStatus();
  };
  const auto persist = [&](const std::vector<std::pair<int, double>>& originals) -> Status {
    std::string e = "persist";
    for (const auto& [gpu, w] : originals) e += fmt::format(" {}:{}", gpu, w);
    events.push_back(e);
    return OkStatus();
  };
  const auto clear = [&] { events.push_back("clear"); };
  const auto quiet = [](const std::string&) {};
  PowerLimitGuard guard(set, 300.0, /*sustain=*/1, /*margin=*/0.0, persist, clear);
  guard.Follow(250.0, quiet);  // no sample yet: the originals are unknown, nothing written
  EXPECT_TRUE(events.empty());
  telemetry::Sample s = At(0.0, {240.0, 240.0});
  s.gpus[0].power_limit_w = 400.0;
  s.gpus[1].power_limit_w = 260.0;
  guard.Observe(s, quiet);
  guard.Follow(280.0, quiet);  // never above a GPU's original: 260 on GPU 1
  EXPECT_EQ(events, (std::vector<std::string>{"persist 0:400 1:260", "set 0 280", "set 1 260"}));
  events.clear();
  guard.Follow(280.0, quiet);     // unchanged: nothing
  guard.SetBudget(290.0, quiet);  // the backstop is not engaged: the budget moves no limit
  EXPECT_TRUE(events.empty());
  guard.Follow(270.0, quiet);
  EXPECT_EQ(events, (std::vector<std::string>{"set 0 270", "set 1 260"}));
  events.clear();
  // The backstop engages at the budget (290); the controller's lower limit holds.
  s.gpus[0].power_w = s.gpus[1].power_w = 320.0;
  guard.Observe(s, quiet);
  ASSERT_TRUE(guard.engaged());
  guard.Follow(270.0, quiet);
  EXPECT_EQ(events.back(), "set 1 260");
  EXPECT_EQ(events[events.size() - 2], "set 0 270");
  events.clear();
  guard.Follow(0.0, quiet);  // lifted by the controller: the backstop's budget holds
  EXPECT_EQ(events, (std::vector<std::string>{"set 0 290", "set 1 260"}));
  events.clear();
  ASSERT_TRUE(guard.Restore(quiet).ok());
  EXPECT_EQ(events, (std::vector<std::string>{"set 0 400", "set 1 260", "clear"}));
}

TEST(Guard, WithoutItsStateFileTheControllersLimitIsNotWrittenAndThatIsSaidOnce) {
  int sets = 0;
  PowerLimitGuard guard(
      [&](int, double) -> Status { return ++sets, OkStatus(); }, 300.0, 4, 0.02,
      [](const std::vector<std::pair<int, double>>&) -> Status { return Error::Io("disk full"); });
  telemetry::Sample s = At(0.0, {200.0});
  s.gpus[0].power_limit_w = 350.0;
  std::vector<std::string> log;
  const auto logger = [&](const std::string& l) { log.push_back(l); };
  guard.Observe(s, logger);
  for (double w : {280.0, 270.0, 260.0}) guard.Follow(w, logger);
  EXPECT_EQ(sets, 0);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_THAT(log[0], HasSubstr("disk full; the controller's power limits are not written"));
}

TEST(Guard, ALimitLiftedByTheControllerPutsTheOriginalsBack) {
  std::vector<std::pair<int, double>> calls;
  PowerLimitGuard guard(
      [&](int gpu, double w) -> Status {
        calls.emplace_back(gpu, w);
        return OkStatus();
      },
      300.0, /*sustain=*/4, /*margin=*/0.02);
  telemetry::Sample s = At(0.0, {200.0});
  s.gpus[0].power_limit_w = 350.0;
  const auto quiet = [](const std::string&) {};
  guard.Observe(s, quiet);
  guard.Follow(280.0, quiet);
  guard.Follow(0.0, quiet);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1], std::make_pair(0, 350.0));
  ASSERT_TRUE(guard.Restore(quiet).ok());
  EXPECT_EQ(calls.back(), std::make_pair(0, 350.0));
}

TEST(Guard, EngagedLimitsFollowAMovingBudgetNeverAboveTheOriginal) {
  std::vector<std::pair<int, double>> calls;
  PowerLimitGuard guard(
      [&](int gpu, double w) -> Status {
        calls.emplace_back(gpu, w);
        return OkStatus();
      },
      300.0, /*sustain=*/1, /*margin=*/0.0);
  std::vector<std::string> log;
  auto logger = [&](const std::string& l) { log.push_back(l); };
  telemetry::Sample s = At(0.0, {320.0});
  s.gpus[0].power_limit_w = 350.0;
  guard.SetBudget(300.0, logger);  // unchanged: nothing
  EXPECT_TRUE(calls.empty());
  guard.Observe(s, logger);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], std::make_pair(0, 300.0));
  guard.SetBudget(250.0, logger);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1], std::make_pair(0, 250.0));
  guard.SetBudget(500.0, logger);  // above the original 350 W: the original
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[2], std::make_pair(0, 350.0));
  ASSERT_TRUE(guard.Restore(logger).ok());
  EXPECT_EQ(calls.back(), std::make_pair(0, 350.0));
}

TEST(Guard, AGpuWithoutAReadingIsLeftOutOfTheMeanNotCountedAsZero) {
  std::vector<std::pair<int, double>> calls;
  PowerLimitGuard guard(
      [&](int gpu, double w) -> Status {
        calls.emplace_back(gpu, w);
        return OkStatus();
      },
      300.0, /*sustain=*/2, /*margin=*/0.0);
  std::vector<std::string> log;
  auto logger = [&](const std::string& l) { log.push_back(l); };
  // GPU 0 at 320 W, GPU 1 lost: the job's power per GPU is 320 (as 0 W it would be 160, under).
  telemetry::Sample s = At(0.0, {320.0, 320.0});
  s.gpus[0].power_limit_w = 400.0;
  s.gpus[1].power_limit_w = 400.0;
  guard.Observe(s, logger);  // both read: over, 1
  s.gpus[1].power_w.reset();
  guard.Observe(s, logger);  // one read, 320: over, 2 -> engaged
  EXPECT_TRUE(guard.engaged());
  ASSERT_EQ(calls.size(), 2u);
  // An interval with no reading at all neither extends nor breaks a run.
  PowerLimitGuard quiet([&](int, double) { return OkStatus(); }, 300.0, 2, 0.0);
  telemetry::Sample none = At(0.0, {320.0});
  quiet.Observe(none, logger);  // over: 1
  none.gpus[0].power_w.reset();
  quiet.Observe(none, logger);  // unknown: still 1
  EXPECT_FALSE(quiet.engaged());
  none.gpus[0].power_w = 320.0;
  quiet.Observe(none, logger);  // over: 2
  EXPECT_TRUE(quiet.engaged());
}

TEST(Guard, LeavesAloneALimitItCouldNotReadAndReportsFailures) {
  int sets = 0;
  PowerLimitGuard guard(
      [&](int gpu, double) -> Status {
        ++sets;
        if (gpu == 0) return OkStatus();
        return Error::Io("nvml: GPU 1: cannot set the power limit");
      },
      300.0, 1);
  std::vector<std::string> log;
  telemetry::Sample s = At(0.0, {350.0, 350.0, 350.0});
  s.gpus[0].power_limit_w = 400.0;
  s.gpus[1].power_limit_w = 400.0;  // GPU 2's limit unknown
  guard.Observe(s, [&](const std::string& l) { log.push_back(l); });
  EXPECT_EQ(sets, 2);
  ASSERT_EQ(log.size(), 3u);
  EXPECT_THAT(log[0], HasSubstr("GPU 2: its power limit could not be read; left alone"));
  EXPECT_THAT(log[1], HasSubstr("GPU 0: power limit 400 W -> 300 W"));
  EXPECT_THAT(log[2], HasSubstr("cannot set the power limit"));
  EXPECT_TRUE(guard.Restore([](const std::string&) {}).ok());  // only GPU 0 was changed
  EXPECT_EQ(sets, 3);
}

// The state file's contract: the originals are persisted before the first change (and nothing
// changes when that fails); it is cleared once every limit is back, and kept otherwise.
TEST(Guard, PersistsTheOriginalsBeforeAnyChangeAndClearsThemOnlyWhenAllAreBack) {
  std::vector<std::string> events;
  bool fail_restore = false;
  const auto set = [&](int gpu, double w) -> Status {
    events.push_back(fmt::format("set {} {}", gpu, w));
    if (fail_restore && w == 400.0) return Error::Io("nvml: GPU 0: lost");
    return OkStatus();
  };
  const auto persist = [&](const std::vector<std::pair<int, double>>& originals) -> Status {
    std::string e = "persist";
    for (const auto& [gpu, w] : originals) e += fmt::format(" {}:{}", gpu, w);
    events.push_back(e);
    return OkStatus();
  };
  const auto clear = [&] { events.push_back("clear"); };
  telemetry::Sample s = At(0.0, {350.0, 350.0});
  s.gpus[0].power_limit_w = 400.0;
  s.gpus[1].power_limit_w = 450.0;
  const auto quiet = [](const std::string&) {};
  {
    PowerLimitGuard guard(set, 300.0, 1, 0.02, persist, clear);
    guard.Observe(s, quiet);
    ASSERT_TRUE(guard.Restore(quiet).ok());
    EXPECT_EQ(events, (std::vector<std::string>{"persist 0:400 1:450", "set 0 300", "set 1 300",
                                                "set 0 400", "set 1 450", "clear"}));
  }
  events.clear();
  {
    PowerLimitGuard guard(
        set, 300.0, 1, 0.02,
        [&](const std::vector<std::pair<int, double>>&) -> Status {
          events.push_back("persist failed");
          return Error::Io("disk full");
        },
        clear);
    std::vector<std::string> log;
    guard.Observe(s, [&](const std::string& l) { log.push_back(l); });
    EXPECT_EQ(events, (std::vector<std::string>{"persist failed"}));  // no limit touched
    ASSERT_EQ(log.size(), 1u);
    EXPECT_THAT(log[0], HasSubstr("disk full; no power limit changed"));
  }
  events.clear();
  {
    fail_restore = true;
    PowerLimitGuard guard(set, 300.0, 1, 0.02, persist, clear);
    guard.Observe(s, quiet);
    EXPECT_FALSE(guard.Restore(quiet).ok());
    EXPECT_EQ(events.back(), "set 1 450");  // tried them all; the state file stays
  }
}

// Bad reports: each refused with 400 naming its field (413 past the size cap).
void ExpectBadReportsRefused(httplib::Client& c, const httplib::Headers& auth) {
  auto r = c.Post("/v1/report", auth, "{\"step\": -1}", "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("field 'step'"));
  r = c.Post("/v1/report", auth, R"({"step": 1, "phase": "dancing", "tokens": 1, "in_flight": 0})",
             "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("field 'phase'"));
  r = c.Post("/v1/report", auth,
             R"({"step": 1, "phase": "train", "tokens": 1e300, "in_flight": 0})",
             "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("field 'tokens': expected a number in [0, 1e15]"));
  r = c.Post("/v1/report", auth,
             R"({"step": 1, "phase": "train", "tokens": 1, "in_flight": 0, "group_size": 0})",
             "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("field 'group_size'"));
  r = c.Post("/v1/report", auth, "{not json", "application/json");
  EXPECT_EQ(r->status, 400);
  r = c.Post("/v1/report", auth, std::string(kMaxBodyBytes + 1, ' '), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
}

// The dashboard: HTML, a policy that lets it talk to this agent alone, nothing from elsewhere.
void ExpectTheDashboardSelfContained(httplib::Client& c) {
  auto r = c.Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_THAT(r->get_header_value("Content-Type"), HasSubstr("text/html"));
  EXPECT_THAT(r->get_header_value("Content-Security-Policy"), HasSubstr("connect-src 'self'"));
  EXPECT_THAT(r->body, HasSubstr("uPlot"));  // the chart library, inlined at build time
  EXPECT_THAT(r->body, HasSubstr("/v1/status"));
  for (const char* remote : {"src=\"http", "href=\"http", "src='http", "fetch(\"http"}) {
    EXPECT_EQ(r->body.find(remote), std::string::npos) << remote;  // nothing from elsewhere
  }
}

TEST(Server, ApiEndToEnd) {
  Served served;
  Agent& core = served.core;
  Shared& shared = served.shared;
  ApiConfig api;
  api.access.token = "s3cret";
  ApiServer server(shared, api);
  ASSERT_TRUE(server.Start("127.0.0.1", 0).ok());
  httplib::Client c("127.0.0.1", server.port());

  auto r = c.Get("/v1/actuation");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  auto j = nlohmann::json::parse(r->body);
  EXPECT_EQ(j["concurrency"], 1);
  for (const char* key : {"concurrency", "group_size", "seq", "valid_for_s", "reason"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  const uint64_t seq = j["seq"];

  // Long poll: returns once a newer decision exists (the tick may come before or after the
  // client starts waiting; either way the answer is newer than `seq`).
  std::thread ticker([&] {
    {
      std::lock_guard lock(shared.mu);
      core.Tick(0.0, At(0.0, {100.0}));
    }
    shared.NotifyDecision();
  });
  r = c.Get(("/v1/actuation?after=" + std::to_string(seq) + "&timeout_s=20").c_str());
  ticker.join();
  ASSERT_TRUE(r);
  EXPECT_GT(nlohmann::json::parse(r->body)["seq"].get<uint64_t>(), seq);

  const std::string report = R"({"step": 3, "phase": "rollout", "tokens": 500, "in_flight": 12})";
  r = c.Post("/v1/report", report, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);  // no token
  httplib::Headers auth{{"Authorization", "Bearer s3cret"}};
  r = c.Post("/v1/report", auth, report, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  ExpectBadReportsRefused(c, auth);

  r = c.Get("/v1/status");
  ASSERT_TRUE(r);
  j = nlohmann::json::parse(r->body);
  EXPECT_EQ(j["report"]["step"], 3);
  EXPECT_EQ(j["report"]["phase"], "rollout");
  EXPECT_EQ(j["budget_w"], 300.0);
  EXPECT_EQ(j["version"], std::string(Version()));  // what runs, for a bug report
  EXPECT_EQ(j["commit"], std::string(Commit()));
  EXPECT_EQ(j["windows"]["0.5s"], 0);  // one sample so far: its window is still open
  r = c.Get("/v1/history");
  ASSERT_TRUE(r);
  j = nlohmann::json::parse(r->body);
  EXPECT_EQ(j["budget_w"], 300.0);
  ASSERT_EQ(j["points"].size(), 1u);
  EXPECT_EQ(j["points"][0]["t_s"], 0.0);
  EXPECT_EQ(j["points"][0]["power_w"], nlohmann::json::array({100.0}));
  r = c.Get("/v1/history?after=0");
  ASSERT_TRUE(r);
  EXPECT_TRUE(nlohmann::json::parse(r->body)["points"].empty());
  r = c.Get("/v1/history?after=soon");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("after"));
  ExpectTheDashboardSelfContained(c);
  r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_THAT(r->body, HasSubstr("headroom_power_watts{gpu=\"0\"} 100"));
  EXPECT_THAT(r->body, HasSubstr("headroom_budget_watts 300"));
  EXPECT_THAT(r->body, HasSubstr("# TYPE headroom_decisions_total counter"));
  EXPECT_THAT(r->body,
              HasSubstr(fmt::format("headroom_build_info{{version=\"{}\",commit=\"{}\"}} 1",
                                    Version(), Commit())));
  server.Stop();
}

TEST(Server, LongPollsCannotStarveTheOtherEndpoints) {
  Served served;
  Agent& core = served.core;
  Shared& shared = served.shared;
  ApiServer server(shared, ApiConfig{});
  ASSERT_TRUE(server.Start("127.0.0.1", 0).ok());
  const uint64_t seq = core.actuation().seq;
  // More long-polls than may wait: kMaxLongPolls wait, the rest answer at once. The clients
  // come one at a time, each once the previous one is accounted for (waiting or answered), so
  // that no burst of connections meets the listen backlog.
  const int clients = kDefaultMaxLongPolls + 12;
  std::atomic<int> answered{0};
  std::atomic<int> ok{0};
  std::vector<std::thread> pollers;
  httplib::Client c("127.0.0.1", server.port());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int i = 0; i < clients; ++i) {
    pollers.emplace_back([&] {
      httplib::Client poller("127.0.0.1", server.port());
      poller.set_read_timeout(60, 0);
      auto r = poller.Get(("/v1/actuation?after=" + std::to_string(seq) + "&timeout_s=25").c_str());
      if (r && r->status == 200) ++ok;
      ++answered;
    });
    int waiting = -1;
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = c.Get("/v1/status");  // answered even now: the other endpoints are not starved
      if (!r) break;
      waiting = nlohmann::json::parse(r->body)["long_polls_waiting"].get<int>();
      if (waiting + answered.load() == i + 1) break;
      std::this_thread::yield();
    }
    if (waiting + answered.load() != i + 1) {
      ADD_FAILURE() << "client " << i << " not accounted for";
      break;  // release and join the others below
    }
    EXPECT_EQ(waiting, std::min(i + 1, kDefaultMaxLongPolls)) << "client " << i;
    EXPECT_EQ(answered.load(), std::max(0, i + 1 - kDefaultMaxLongPolls)) << "client " << i;
  }
  // A new decision releases every waiting one.
  {
    std::lock_guard lock(shared.mu);
    core.Tick(0.0, At(0.0, {100.0}));
  }
  shared.NotifyDecision();
  for (auto& t : pollers) t.join();
  EXPECT_EQ(ok.load(), static_cast<int>(pollers.size()));
  EXPECT_EQ(ok.load(), clients);
  server.Stop();
}

// The runner's thread, the server's thread and clients' threads at once (the TSan build runs
// this): decisions published while clients long-poll, report and read status; every long-poll
// answer is newer than what it waited on, and Stop() returns with clients still connected.
TEST(Server, DecisionsWhileClientsPollReportAndRead) {
  Served served;
  Agent& core = served.core;
  Shared& shared = served.shared;
  std::atomic<double>& now = served.now;
  ApiConfig api;
  api.access.token = "t";
  ApiServer server(shared, api);
  ASSERT_TRUE(server.Start("127.0.0.1", 0).ok());
  std::atomic<bool> done{false};
  std::atomic<int> stale{0};
  std::atomic<int> answers{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 3; ++i) {
    clients.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", server.port());
      c.set_read_timeout(10, 0);
      uint64_t seq = 0;
      while (!done.load()) {
        if (i == 0) {
          auto r = c.Get(("/v1/actuation?after=" + std::to_string(seq) + "&timeout_s=2").c_str());
          if (!r || r->status != 200) continue;
          const uint64_t got = nlohmann::json::parse(r->body)["seq"].get<uint64_t>();
          if (got < seq) ++stale;
          seq = got;
        } else if (i == 1) {
          auto r = c.Post("/v1/report", {{"Authorization", "Bearer t"}},
                          R"({"step": 1, "phase": "rollout", "tokens": 5, "in_flight": 2})",
                          "application/json");
          if (r && r->status != 200) ++stale;
        } else {
          auto r = c.Get("/v1/status");
          if (r && r->status != 200) ++stale;
        }
        ++answers;
      }
    });
  }
  for (int k = 0; k < 400; ++k) {
    {
      std::lock_guard lock(shared.mu);
      now.store(0.5 * k);
      core.Tick(0.5 * k, At(0.5 * k, {k % 2 == 0 ? 250.0 : 350.0}));
    }
    shared.NotifyDecision();
    if (k % 50 == 0) std::this_thread::yield();
  }
  // Every client has been answered at least once before the end.
  while (answers.load() < 30) std::this_thread::yield();
  server.Stop();  // with the clients still connected and polling
  done.store(true);
  for (auto& t : clients) t.join();
  EXPECT_EQ(stale.load(), 0);
  EXPECT_GT(server.counters().requests, 0u);
}

// The routes' answers, request by request (no sockets).
TEST(Api, AnswersEachBadRequestWithItsStatus) {
  Served served;
  Agent& core = served.core;
  Shared& shared = served.shared;
  ApiConfig config;
  config.access.token = "s3cret";
  config.access.allowed_hosts = {"node-7"};
  config.max_long_polls = 1;
  Api api(shared, config);
  const std::string report = R"({"step": 1, "phase": "train", "tokens": 1, "in_flight": 0})";
  const auto call = [&](std::string_view method, std::string_view target,
                        std::optional<std::string_view> host = "127.0.0.1:10470",
                        std::optional<std::string_view> auth = std::nullopt,
                        std::optional<std::string_view> type = std::nullopt,
                        std::string_view body = "") {
    net::Request r;
    r.method = method;
    r.target = target;
    r.host = host;
    r.authorization = auth;
    r.content_type = type;
    r.body = body;
    return api.Handle(r);
  };
  EXPECT_EQ(call("GET", "/v1/status").status, 200);
  EXPECT_EQ(call("GET", "/v1/status", std::nullopt).status, 200);  // HTTP/1.0: no Host
  EXPECT_EQ(call("GET", "/v1/status", "node-7").status, 200);
  EXPECT_EQ(call("GET", "/v1/status", "NODE-7:10470").status, 200);
  EXPECT_EQ(call("GET", "/v1/status", "10.1.2.3:10470").status, 200);
  EXPECT_EQ(call("GET", "/v1/status", "[fe80::1]:10470").status, 200);
  EXPECT_EQ(call("GET", "/", "evil.example").status, 403);
  EXPECT_EQ(call("GET", "/v1/status", "node-7.evil.example").status, 403);
  EXPECT_EQ(call("GET", "/nope").status, 404);
  const net::Response wrong = call("PUT", "/v1/status");
  EXPECT_EQ(wrong.status, 405);
  ASSERT_EQ(wrong.headers.size(), 1u);
  EXPECT_EQ(wrong.headers[0], std::make_pair(std::string("Allow"), std::string("GET, HEAD")));
  EXPECT_EQ(call("GET", "/v1/report").status, 405);
  EXPECT_EQ(
      call("POST", "/v1/report", "127.0.0.1", std::nullopt, "application/json", report).status,
      401);
  for (const char* auth : {"Bearer s3cret", "bearer s3cret", "BEARER  s3cret "}) {
    EXPECT_EQ(call("POST", "/v1/report", "127.0.0.1", auth, "application/json", report).status, 200)
        << auth;
  }
  for (const char* auth : {"Bearer s3cre", "Bearer s3cret2", "Basic s3cret", "Bearers3cret", ""}) {
    EXPECT_EQ(call("POST", "/v1/report", "127.0.0.1", auth, "application/json", report).status, 401)
        << auth;
  }
  for (const char* type :
       {"text/plain", "application/x-www-form-urlencoded", "application/jsonx", ""}) {
    EXPECT_EQ(call("POST", "/v1/report", "127.0.0.1", "Bearer s3cret", type, report).status, 415)
        << type;
  }
  EXPECT_EQ(call("POST", "/v1/report", "127.0.0.1", "Bearer s3cret",
                 "Application/JSON; charset=utf-8", report)
                .status,
            200);
  const net::Response utf8 = call("POST", "/v1/report", "127.0.0.1", "Bearer s3cret",
                                  "application/json", "{\"step\": 1, \"phase\": \"tr\xe9in\"}");
  EXPECT_EQ(utf8.status, 400);
  // Offsets from 0: the 0xE9 that starts no valid sequence is byte 24 of the body.
  EXPECT_THAT(utf8.body, HasSubstr("field 'phase': invalid UTF-8 at byte 24"));
  EXPECT_TRUE(nlohmann::json::accept(utf8.body));
  // Long-polls: counted while parked, within their cap.
  const uint64_t seq = core.actuation().seq;
  const std::string poll = "/v1/actuation?after=" + std::to_string(seq) + "&timeout_s=2";
  const net::Response parked = call("GET", poll);
  ASSERT_TRUE(parked.park.has_value());
  EXPECT_EQ(parked.park->after, seq);
  EXPECT_EQ(parked.park->wait_s, 2.0);
  EXPECT_FALSE(call("GET", poll).park.has_value());  // the cap is 1: answered at once
  EXPECT_EQ(shared.long_polls, 1);
  EXPECT_FALSE(api.Ready(seq));
  EXPECT_EQ(api.EndPark(seq).status, 200);
  EXPECT_EQ(shared.long_polls, 0);
  EXPECT_EQ(call("GET", "/v1/actuation?after=1&timeout_s=30.5").status, 400);
  EXPECT_EQ(call("GET", "/v1/actuation?after=1&&timeout_s=1").status, 400);
  EXPECT_EQ(call("GET", "/v1/actuation?").status, 200);  // an empty query is no query
  EXPECT_EQ(call("GET", "v1/status").status, 400);
}

TEST(Api, TokenOnReadsLeavesOnlyTheStaticPageOpen) {
  Served served;
  Shared& shared = served.shared;
  ApiConfig config;
  config.access.token = "t";
  config.access.token_on_reads = true;
  Api api(shared, config);
  for (const char* path : {"/v1/status", "/v1/actuation", "/v1/history", "/metrics"}) {
    net::Request r;
    r.method = "GET";
    r.target = path;
    EXPECT_EQ(api.Handle(r).status, 401) << path;
    r.authorization = "Bearer t";
    EXPECT_EQ(api.Handle(r).status, 200) << path;
  }
  net::Request page;
  page.method = "GET";
  page.target = "/";
  EXPECT_EQ(api.Handle(page).status, 200);
}

// A source that works until t = 2 s, then fails.
class Failing final : public telemetry::Source {
 public:
  std::string_view name() const override { return "failing"; }
  int gpus() const override { return 1; }
  Result<telemetry::Sample> Read(double t_s) override {
    if (t_s > 2.0) return Error::Io("telemetry stopped");
    return At(t_s, {150.0});
  }
};

TEST(Recorder, TokenColumnIsWholeTokensThatSumToTheRoundedTotal) {
  const std::string path = ::testing::TempDir() + "/recorder_tokens.csv";
  {
    trace::TraceMeta meta;
    meta.nameplate_w = 400.0;
    meta.sample_interval_s = 0.5;
    auto rec = Recorder::Open(path, meta);
    ASSERT_TRUE(rec.ok());
    // Totals 0.4, 0.8, 1.2, 10.6 -> rounded 0, 1, 1, 11 -> increments 0, 1, 0, 10; then the
    // trainer restarts and reports 3: 3 new tokens.
    const double totals[] = {0.4, 0.8, 1.2, 10.6, 3.0};
    for (int k = 0; k < 5; ++k)
      rec->Write(0.5 * k, {100.0, 101.0}, "rollout", 0, totals[k], 4, 8, 250.0);
  }
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "t_s,gpu,power_w,phase,step,tokens,concurrency,group_size,budget_w");
  std::vector<std::string> rows;
  while (std::getline(in, line)) rows.push_back(line);
  ASSERT_EQ(rows.size(), 10u);
  EXPECT_EQ(rows[0], "0.000,0,100.00,rollout,0,0,4,8,250.00");
  EXPECT_EQ(rows[1], "0.000,1,101.00,rollout,0,0,4,8,250.00");  // tokens on GPU 0's row only
  EXPECT_EQ(rows[2], "0.500,0,100.00,rollout,0,1,4,8,250.00");
  EXPECT_EQ(rows[4], "1.000,0,100.00,rollout,0,0,4,8,250.00");
  EXPECT_EQ(rows[6], "1.500,0,100.00,rollout,0,10,4,8,250.00");
  EXPECT_EQ(rows[8], "2.000,0,100.00,rollout,0,3,4,8,250.00");
  // The sidecar, as headroom analyze will find it.
  std::vector<std::string> warnings;
  auto meta = trace::LoadMetaFor(path, &warnings);
  ASSERT_TRUE(meta.ok()) << meta.error().message();
  ASSERT_TRUE(meta->has_value());
  EXPECT_EQ((*meta)->nameplate_w, 400.0);
  EXPECT_EQ((*meta)->sample_interval_s, 0.5);
  EXPECT_TRUE(warnings.empty());
}

// Issue 36, item 1: --trace-out never moves what is not a regular file away (a directory went
// to PATH.1), and /dev/null is written in place, with no metadata file beside it in /dev.
TEST(Recorder, ATraceOutThatIsNotARegularFileIsRefusedOrWrittenInPlace) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "headroom_trace_out_dir";
  fs::remove_all(dir);
  fs::create_directories(dir / "logs");
  const std::string logs = (dir / "logs").string();
  auto rotated = RotateTrace(logs);
  ASSERT_FALSE(rotated.ok());
  EXPECT_NE(rotated.error().message().find("is a directory, not a regular file"), std::string::npos)
      << rotated.error().message();
  EXPECT_FALSE(Recorder::Open(logs).ok());
  EXPECT_TRUE(fs::is_directory(logs));
  EXPECT_FALSE(fs::exists(dir / "logs.1"));

  auto kept = RotateTrace("/dev/null");
  ASSERT_TRUE(kept.ok()) << kept.error().message();
  EXPECT_EQ(*kept, "");
  trace::TraceMeta meta;
  meta.sample_interval_s = 0.1;
  auto rec = Recorder::Open("/dev/null", meta);
  ASSERT_TRUE(rec.ok()) << rec.error().message();
  EXPECT_FALSE(fs::exists(trace::MetaPathFor("/dev/null")));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  fs::remove_all(dir);
}

TEST(Runner, TelemetryStopsSafeWithinOneIntervalAndTheTraceIsReadable) {
  Served served;
  Agent& core = served.core;
  Shared& shared = served.shared;
  Failing source;
  const std::string path = ::testing::TempDir() + "/agent_trace.csv";
  auto rec = Recorder::Open(path);
  ASSERT_TRUE(rec.ok());
  std::vector<double> times;
  Clock clock{[&](double t) { times.push_back(t); }};
  std::atomic<bool> stop{false};
  RunnerOptions o;
  o.duration_s = 3.0;
  std::vector<std::string> log;
  const RunSummary s = agent::Run(source, nullptr, shared, &*rec, o, clock, stop,
                                  [&](const std::string& l) { log.push_back(l); });
  EXPECT_EQ(s.intervals, 7u);         // 0, 0.5, ..., 3.0
  EXPECT_EQ(s.telemetry_errors, 2u);  // 2.5 and 3.0
  EXPECT_EQ(times.back(), 3.0);
  EXPECT_EQ(core.actuation().concurrency, 1);  // the first failing interval made it safe
  EXPECT_THAT(core.actuation().reason, HasSubstr("telemetry stopped"));
  ASSERT_FALSE(log.empty());
  EXPECT_THAT(log[0], HasSubstr("telemetry stopped -> safe actuation"));
  trace::CollectingSink sink;
  auto read = trace::ReadTraceFile(path, {}, sink);
  ASSERT_TRUE(read.ok()) << read.error().message();
  ASSERT_EQ(sink.series().size(), 1u);
  EXPECT_EQ(sink.series()[0].t_s.size(), 5u);  // the good intervals 0 .. 2.0
  EXPECT_EQ(sink.series()[0].power_w[0], 150.0);
}

// Issue 36, item 2: a full disk under the trace. The file's size limit (RLIMIT_FSIZE, with
// SIGXFSZ ignored: writes past it fail with EFBIG, as on a full disk with ENOSPC) is set once
// the header is written. The loop runs every interval, says so once, and counts every failed
// write where /metrics reads it.
TEST(Runner, ATraceThatCannotBeWrittenIsSaidOnceAndCountedAndTheLoopGoesOn) {
  Served served;
  Failing source;
  const std::string path = ::testing::TempDir() + "/agent_trace_full.csv";
  auto rec = Recorder::Open(path);
  ASSERT_TRUE(rec.ok());
  const auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &before), 0);
  rlimit small = before;
  small.rlim_cur = 100;  // the header (71 bytes) and not two rows
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::atomic<bool> stop{false};
  RunnerOptions o;
  o.duration_s = 3.0;
  std::vector<std::string> log;
  const RunSummary s = agent::Run(source, nullptr, served.shared, &*rec, o, Clock{[](double) {}},
                                  stop, [&](const std::string& l) { log.push_back(l); });
  setrlimit(RLIMIT_FSIZE, &before);
  std::signal(SIGXFSZ, previous_handler);
  EXPECT_EQ(s.intervals, 7u);
  EXPECT_GE(s.trace_write_errors, 2u);  // the flushes at 1 s, 2 s and the last
  EXPECT_EQ(s.trace_write_errors, rec->write_errors());
  EXPECT_EQ(served.core.Status(0.0).trace_write_errors, s.trace_write_errors);
  EXPECT_EQ(rec->first_error(), std::strerror(EFBIG));
  const auto said = std::count_if(log.begin(), log.end(), [](const std::string& l) {
    return l.find("trace: cannot write the agent trace: File too large") != std::string::npos;
  });
  EXPECT_EQ(said, 1);
  const std::string metrics = MetricsText(served.core.Status(0.0), std::nullopt);
  EXPECT_THAT(metrics, HasSubstr(fmt::format("headroom_trace_write_errors_total {}\n",
                                             s.trace_write_errors)));
}

TEST(Api, PostedBudgetIsValidatedAndNamesItsField) {
  Served served;
  Shared& shared = served.shared;
  PostedBudget budget(300.0, "--budget-w");
  shared.budget = &budget;
  shared.gpus = 4;
  ApiConfig config;
  config.access.token = "s3cret";
  Api api(shared, config);
  const auto post = [&](std::string_view body,
                        std::optional<std::string_view> auth = "Bearer s3cret",
                        std::optional<std::string_view> type = "application/json") {
    net::Request r;
    r.method = "POST";
    r.target = "/v1/budget";
    r.host = "127.0.0.1";
    r.authorization = auth;
    r.content_type = type;
    r.body = body;
    return api.Handle(r);
  };
  EXPECT_EQ(post(R"({"budget_per_gpu_w": 250})", std::nullopt).status, 401);
  EXPECT_EQ(post(R"({"budget_per_gpu_w": 250})", "Bearer s3cret", "text/plain").status, 415);
  struct Bad {
    const char* body;
    const char* says;
  };
  for (const Bad& bad : {
           Bad{R"({"budget_per_gpu_w": 0})",
               "field 'budget_per_gpu_w': expected watts in [1, 10000]"},
           Bad{R"({"budget_per_gpu_w": "250"})", "field 'budget_per_gpu_w'"},
           Bad{R"({"budget_per_gpu_w": 1e400})", "body is not JSON"},
           Bad{R"({"job_budget_w": 2})",
               "field 'job_budget_w': expected watts in [4, 40000] for 4 GPU(s)"},
           Bad{R"({"budget_per_gpu_w": 250, "job_budget_w": 1000})", "give one of"},
           Bad{R"({})", "give one of"},
           Bad{R"({"budget_w": 250})", "field 'budget_w': unknown"},
           Bad{R"([250])", "expected a JSON object"},
           Bad{"{\"budget_per_gpu_w\": 250, \"x\xff\": 1}", "invalid UTF-8"},
       }) {
    const net::Response r = post(bad.body);
    EXPECT_EQ(r.status, 400) << bad.body;
    EXPECT_THAT(r.body, HasSubstr(bad.says)) << bad.body;
  }
  EXPECT_EQ(budget.Current(0.0).budget_per_gpu_w, 300.0);  // nothing bad was taken
  EXPECT_EQ(budget.Current(0.0).version, 0u);
  net::Response r = post(R"({"job_budget_w": 1000})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["budget_per_gpu_w"], 250.0);
  EXPECT_EQ(j["job_budget_w"], 1000.0);
  EXPECT_EQ(j["below_floor"], false);
  EXPECT_EQ(budget.Current(0.0).budget_per_gpu_w, 250.0);
  EXPECT_EQ(budget.Current(0.0).from, "POST /v1/budget");
  // A policy's trained range bounds what it takes.
  shared.budget_range_w = std::make_pair(200.0, 320.0);
  r = post(R"({"budget_per_gpu_w": 150})");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("outside the policy's trained budgets [200, 320]"));
  EXPECT_EQ(post(R"({"budget_per_gpu_w": 210.5})").status, 200);
  EXPECT_EQ(budget.Current(0.0).budget_per_gpu_w, 210.5);
  net::Request get;
  get.method = "GET";
  get.target = "/v1/budget";
  get.host = "127.0.0.1";
  EXPECT_EQ(api.Handle(get).status, 405);
  shared.budget = nullptr;  // an agent that takes no posted budget
  Api without(shared, config);
  net::Request none;
  none.method = "POST";
  none.target = "/v1/budget";
  none.authorization = "Bearer s3cret";
  none.content_type = "application/json";
  none.body = R"({"budget_per_gpu_w": 250})";
  EXPECT_EQ(without.Handle(none).status, 404);
  // In a site: 409, the site sets the budget (issue 36, item 9: it was 404); the token first.
  shared.site = true;
  Api in_site(shared, config);
  net::Response conflict = in_site.Handle(none);
  EXPECT_EQ(conflict.status, 409);
  EXPECT_THAT(conflict.body, HasSubstr("in a site the coordinator sets the budget"));
  none.authorization = std::nullopt;
  EXPECT_EQ(in_site.Handle(none).status, 401);
}

TEST(Runner, APostedBudgetReachesTheNextDecisionTheTraceAndTheStatus) {
  Served served;
  Agent& core = served.core;
  Shared& shared = served.shared;
  PostedBudget budget(300.0, "--budget-w");
  shared.budget = &budget;
  shared.gpus = 1;
  Failing source;  // 150 W until 2.0 s
  const std::string path = ::testing::TempDir() + "/agent_budget_trace.csv";
  auto rec = Recorder::Open(path);
  ASSERT_TRUE(rec.ok());
  // The budget is posted while the runner sleeps before its decision at t = 1.0 s.
  Clock clock{[&](double t) {
    if (t == 1.0) budget.Set(140.0, "POST /v1/budget");
  }};
  std::atomic<bool> stop{false};
  RunnerOptions o;
  o.duration_s = 2.0;
  o.budget = &budget;
  std::vector<std::pair<double, double>> observed;
  o.observe = [&](const telemetry::Sample& s, double w) { observed.emplace_back(s.t_s, w); };
  std::vector<std::string> log;
  agent::Run(source, nullptr, shared, &*rec, o, clock, stop,
             [&](const std::string& l) { log.push_back(l); });
  EXPECT_EQ(served.probe.last.budget_w, 140.0);
  EXPECT_EQ(core.actuation().concurrency, 2);  // 150 W over 140 W
  ASSERT_EQ(observed.size(), 5u);
  EXPECT_EQ(observed[1], std::make_pair(0.5, 300.0));
  EXPECT_EQ(observed[2], std::make_pair(1.0, 140.0));
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0], "budget 140.0 W per GPU from POST /v1/budget at t=1.0 s");
  const auto j = nlohmann::json::parse(StatusJson(core.Status(2.0)));
  EXPECT_EQ(j["budget_per_gpu_w"], 140.0);
  EXPECT_EQ(j["budget_from"], "POST /v1/budget");
  trace::CollectingSink sink;
  auto read = trace::ReadTraceFile(path, {}, sink);
  ASSERT_TRUE(read.ok()) << read.error().message();
  ASSERT_EQ(sink.series().size(), 1u);
  EXPECT_EQ(sink.series()[0].budget_w, (std::vector<double>{300.0, 300.0, 140.0, 140.0, 140.0}));
}

}  // namespace
}  // namespace headroom::agent
