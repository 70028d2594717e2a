// The agent and the trainer beside it (docs/TRAINERS.md): a report stands until the next, a
// trainer silent past --report-timeout-s is taken as gone, every rank gets the same decision for a
// step, and a trainer that does not apply the decisions is found out (the mismatch).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "agent/api.h"

namespace headroom::agent::trainer_presence {
namespace {

using ::testing::HasSubstr;

// Proposes the concurrency and group size the test sets, and records what it was given.
class Fixed final : public control::Controller {
 public:
  std::string_view name() const override { return "fixed"; }
  control::Command Decide(const control::Inputs& in) override {
    last = in;
    ++calls;
    return {concurrency, group, limit_w};
  }
  std::optional<double> limit_w;  // a hybrid controller's power limit
  int concurrency = 8;
  int group = 8;
  int calls = 0;
  control::Inputs last;
};

AgentConfig Config() {
  AgentConfig c;
  c.budget_w = 300.0;
  c.limits.concurrency = {1, 64};
  c.limits.group_size = {1, 64};
  c.safe_concurrency = 2;
  c.safe_group_size = 4;
  c.stale_after_s = 1.5;
  c.report_timeout_s = 60.0;
  c.group_size_rule.min_steps = 0;
  c.initial_concurrency = 8;  // the trainer's own: no x2-per-interval climb from the safe 2
  return c;
}

telemetry::Sample At(double t_s, double power_w = 250.0) {
  telemetry::Sample s;
  s.t_s = t_s;
  s.gpus.push_back({power_w, false, {}, {}, {}, {}});
  return s;
}

TrainerReport R(int step, control::Phase phase, std::optional<int> group_size = std::nullopt,
                int in_flight = 0, std::optional<int> engines = std::nullopt) {
  TrainerReport r;
  r.step = step;
  r.phase = phase;
  r.group_size = group_size;
  r.in_flight = in_flight;
  r.engines = engines;
  return r;
}

std::vector<std::string> Messages(Agent& a, LogLevel level) {
  std::vector<std::string> out;
  for (const auto& e : a.TakeWarnings()) {
    if (e.level == level) out.push_back(e.msg);
  }
  return out;
}

TEST(TrainerPresence, AReportsPhaseStandsUntilTheNextOneHoweverLongThePhase) {
  Fixed c;
  Agent a(Config(), c);
  EXPECT_EQ(a.Presence(0.0), TrainerPresence::kNever);
  a.Report(R(3, control::Phase::kLogprob), 1.0);
  // A log-prob phase of 55 s (7B): every decision in it is taken on log-prob, step 3.
  for (double t = 1.5; t <= 56.0; t += 0.5) {
    a.Tick(t, At(t));
    ASSERT_EQ(c.last.phase, control::Phase::kLogprob) << "at " << t;
    ASSERT_EQ(c.last.step, 3);
  }
  EXPECT_EQ(a.Presence(56.0), TrainerPresence::kReporting);
  EXPECT_THAT(a.actuation().reason, HasSubstr("fixed: logprob at step 3"));
  // A heartbeat 5 s later keeps it standing past the first report's minute.
  a.Report(R(3, control::Phase::kLogprob), 56.0);
  a.Tick(100.0, At(100.0));
  EXPECT_EQ(c.last.phase, control::Phase::kLogprob);
  EXPECT_TRUE(Messages(a, LogLevel::kWarn).empty());
}

TEST(TrainerPresence, ATrainerSilentPastTheTimeoutGetsTheSafeActuationAndComesBack) {
  Fixed c;
  AgentConfig config = Config();
  config.silent_power_limit = true;  // --guard-power-limit
  Agent a(config, c);
  a.Report(R(1, control::Phase::kRollout), 0.0);
  a.Tick(0.5, At(0.5));
  EXPECT_EQ(a.actuation().concurrency, 8);
  EXPECT_DOUBLE_EQ(a.actuation().power_limit_w, 0.0);
  a.Tick(60.0, At(60.0));  // 60 s: still within the timeout
  EXPECT_EQ(a.Presence(60.0), TrainerPresence::kReporting);
  EXPECT_EQ(a.actuation().concurrency, 8);
  const int calls = c.calls;
  const uint64_t seq = a.actuation().seq;
  a.Tick(60.5, At(60.5));  // 60.5 s without a report: gone
  EXPECT_EQ(a.Presence(60.5), TrainerPresence::kSilent);
  EXPECT_EQ(c.calls, calls);  // the controller is not asked
  EXPECT_EQ(a.actuation().concurrency, 2);
  EXPECT_EQ(a.actuation().group_size, 8);                // no step known: the group size stays
  EXPECT_DOUBLE_EQ(a.actuation().power_limit_w, 300.0);  // the budget, as the hardware limit
  EXPECT_GT(a.actuation().seq, seq);
  EXPECT_THAT(a.actuation().reason,
              HasSubstr("safe: the trainer has not reported for 60 s (--report-timeout-s 60)"));
  auto warned = Messages(a, LogLevel::kWarn);
  ASSERT_EQ(warned.size(), 1u);
  EXPECT_THAT(warned[0], HasSubstr("no report for 60.5 s"));
  a.Tick(61.0, At(61.0));
  EXPECT_TRUE(a.TakeWarnings().empty());  // said once
  const AgentStatus s = a.Status(61.0);
  EXPECT_EQ(s.trainer, TrainerPresence::kSilent);
  EXPECT_EQ(s.safe_decisions, 2u);
  // Back: the controller steers again (x2 per interval from the safe 2) and the limit the
  // silence imposed is lifted.
  a.Report(R(2, control::Phase::kRollout), 62.0);
  a.Tick(62.5, At(62.5));
  EXPECT_EQ(a.actuation().concurrency, 4);
  EXPECT_DOUBLE_EQ(a.actuation().power_limit_w, 0.0);
  EXPECT_EQ(Messages(a, LogLevel::kInfo).size(), 1u);
}

TEST(TrainerPresence, WithoutTheGuardASilentTrainersActuationSetsNoLimit) {
  Fixed c;
  Agent a(Config(), c);
  a.Report(R(1, control::Phase::kTrain), 0.0);
  a.Tick(61.0, At(61.0));
  EXPECT_EQ(a.actuation().concurrency, 2);
  EXPECT_DOUBLE_EQ(a.actuation().power_limit_w, 0.0);
}

TEST(TrainerPresence, ALimitTheControllerSetIsNeverLiftedForASilenceAndComesBackAfter) {
  Fixed c;
  c.limit_w = 250.0;
  AgentConfig config = Config();
  config.limits.power_limit_min_w = 100.0;
  for (const bool guard : {false, true}) {
    config.silent_power_limit = guard;
    Agent a(config, c);
    a.Report(R(1, control::Phase::kRollout), 0.0);
    a.Tick(0.5, At(0.5));
    ASSERT_DOUBLE_EQ(a.actuation().power_limit_w, 250.0);
    a.Tick(61.0, At(61.0));  // silent: the lower of the controller's 250 and the budget 300
    EXPECT_DOUBLE_EQ(a.actuation().power_limit_w, 250.0) << guard;
    c.limit_w.reset();  // the controller asks nothing more: its 250 stands
    a.Report(R(2, control::Phase::kRollout), 62.0);
    a.Tick(62.5, At(62.5));
    EXPECT_DOUBLE_EQ(a.actuation().power_limit_w, 250.0) << guard;
    c.limit_w = 250.0;
  }
}

TEST(TrainerPresence, FencedWithTheGuardTheGpusGoToTheirLowestLimitAtOnce) {
  Fixed c;
  AgentConfig config = Config();
  config.fenced_power_limit_w = 150.0;  // the GPUs' lowest limit (NVML)
  config.limits.power_limit_min_w = 100.0;
  Agent a(config, c);
  a.Report(R(1, control::Phase::kRollout), 0.0);
  a.Tick(0.5, At(0.5));
  EXPECT_DOUBLE_EQ(a.actuation().power_limit_w, 0.0);
  const uint64_t seq = a.actuation().seq;
  a.SetFenced(true);
  a.Tick(1.0, At(1.0));
  EXPECT_DOUBLE_EQ(a.actuation().power_limit_w, 150.0);
  EXPECT_GT(a.actuation().seq, seq);
  c.limit_w = 120.0;  // a lower one of the controller's stands
  a.Tick(1.5, At(1.5));
  EXPECT_DOUBLE_EQ(a.actuation().power_limit_w, 120.0);
  c.limit_w = 0.0;
  a.SetFenced(false);  // granted again: the controller's (none) from the next decision
  a.Tick(2.0, At(2.0));
  EXPECT_DOUBLE_EQ(a.actuation().power_limit_w, 0.0);
}

TEST(TrainerPresence, ATrainerThatNeverReportedIsSteeredOnPowerAlone) {
  Fixed c;
  Agent a(Config(), c);
  a.Tick(500.0, At(500.0));
  EXPECT_EQ(a.Presence(500.0), TrainerPresence::kNever);
  EXPECT_EQ(c.last.phase, control::Phase::kRollout);
  EXPECT_EQ(a.actuation().concurrency, 8);
  EXPECT_THAT(a.actuation().reason, HasSubstr("on power alone"));
}

TEST(TrainerMismatch, AFixedGroupSizeIsFlaggedAtTheSecondStepBoundaryAndPinsTheDecision) {
  Fixed c;
  c.group = 16;  // the controller wants 16; the trainer's G is fixed at 8
  Agent a(Config(), c);
  // Step 0: the agent announced its safe 4, the trainer runs 8: one boundary differs.
  a.Report(R(0, control::Phase::kRollout, 8), 0.0);
  a.Tick(0.5, At(0.5));
  EXPECT_EQ(a.actuation().group_size, 16);
  EXPECT_FALSE(a.mismatch().group_size);
  // More reports within step 0 are no boundary.
  a.Report(R(0, control::Phase::kTrain, 8), 1.0);
  a.Tick(1.5, At(1.5));
  EXPECT_FALSE(a.mismatch().group_size);
  // Step 1: 8 against 16, the second boundary in a row.
  a.Report(R(1, control::Phase::kRollout, 8), 2.0);
  EXPECT_TRUE(a.mismatch().group_size);
  EXPECT_EQ(a.mismatch().group_size_trainer, 8);
  EXPECT_EQ(a.mismatch().group_size_decided, 16);
  ASSERT_TRUE(a.mismatch().pinned_group_size);
  EXPECT_EQ(*a.mismatch().pinned_group_size, 8);
  auto warned = Messages(a, LogLevel::kWarn);
  ASSERT_EQ(warned.size(), 1u);
  EXPECT_THAT(warned[0], HasSubstr("its group size is 8 at step 1 but the decision is 16"));
  // From then on: the decisions keep 8, and the controller sees 8 now and next.
  for (int step = 2; step < 6; ++step) {
    a.Report(R(step, control::Phase::kRollout, 8), 2.0 * step);
    a.Tick(2.0 * step + 0.5, At(2.0 * step + 0.5));
    EXPECT_EQ(a.actuation().group_size, 8);
    EXPECT_EQ(c.last.group_size, 8);
    EXPECT_EQ(c.last.next_group_size, 8);
  }
  EXPECT_TRUE(Messages(a, LogLevel::kWarn).empty());  // said once
  const AgentStatus s = a.Status(12.0);
  EXPECT_TRUE(s.mismatch.group_size);
  const auto j = nlohmann::json::parse(StatusJson(s));
  EXPECT_EQ(j["trainer"]["mismatch"]["group_size"], true);
  EXPECT_EQ(j["trainer"]["mismatch"]["group_size_trainer"], 8);
  EXPECT_EQ(j["trainer"]["mismatch"]["group_size_decided"], 16);
  EXPECT_EQ(j["trainer"]["mismatch"]["pinned_group_size"], 8);
  EXPECT_THAT(MetricsText(s), HasSubstr("headroom_trainer_mismatch{kind=\"group_size\"} 1\n"));
  EXPECT_THAT(MetricsText(s), HasSubstr("headroom_trainer_mismatch{kind=\"in_flight\"} 0\n"));
  // A trainer whose G then moves (it does read the decisions after all): no longer pinned.
  a.Report(R(6, control::Phase::kRollout, 12), 13.0);
  EXPECT_FALSE(a.mismatch().pinned_group_size);
  a.Tick(13.5, At(13.5));
  EXPECT_EQ(a.actuation().group_size, 16);
}

TEST(TrainerMismatch, OneStepLateIsARaceNotAMismatch) {
  Fixed c;
  c.group = 16;
  Agent a(Config(), c);
  a.Report(R(0, control::Phase::kRollout, 4), 0.0);  // the safe 4, applied
  a.Tick(0.5, At(0.5));                              // 16 decided during step 0
  a.Report(R(1, control::Phase::kRollout, 4), 1.0);  // read before the decision: one late
  a.Report(R(2, control::Phase::kRollout, 16), 2.0);
  a.Report(R(3, control::Phase::kRollout, 16), 3.0);
  EXPECT_FALSE(a.mismatch().any());
}

TEST(TrainerMismatch, EveryRankGetsTheStepsGroupSizeAndHoldFromItsFirstRead) {
  Fixed c;
  c.group = 16;
  Agent a(Config(), c);
  a.SetHold(30.0, 7);
  const Actuation first = a.ForStep(5);  // rank 0 reads step 5
  EXPECT_EQ(first.group_size, 4);
  a.Report(R(4, control::Phase::kTrain, 4), 0.1);
  a.Tick(0.5, At(0.5));  // the decision moves to 16 and the hold ends
  a.SetHold(0.0, 0);
  EXPECT_EQ(a.actuation().group_size, 16);
  const Actuation second = a.ForStep(5);  // rank 1 reads step 5 later
  EXPECT_EQ(second.group_size, 4);
  EXPECT_DOUBLE_EQ(second.hold_s, 30.0);
  EXPECT_EQ(second.hold_id, 7);
  EXPECT_EQ(second.concurrency, a.actuation().concurrency);  // the rest as now
  const Actuation next = a.ForStep(6);
  EXPECT_EQ(next.group_size, 16);
  EXPECT_EQ(next.hold_id, 0);
  // The trainer ran step 5 with the step's 4: no mismatch.
  a.Report(R(5, control::Phase::kRollout, 4), 1.0);
  a.Report(R(6, control::Phase::kRollout, 16), 2.0);
  EXPECT_FALSE(a.mismatch().group_size);
  // The step's answer carries the step.
  const auto j = nlohmann::json::parse(ActuationJson(next, 6));
  EXPECT_EQ(j["step"], 6);
  EXPECT_EQ(j["group_size"], 16);
}

TEST(TrainerMismatch, AHoldIsCutToTheLongestTheAgentPassesOn) {
  Fixed c;
  AgentConfig config = Config();
  config.max_hold_s = 600.0;
  Agent a(config, c);
  a.SetHold(2400.0, 3);
  EXPECT_DOUBLE_EQ(a.actuation().hold_s, 600.0);
  EXPECT_DOUBLE_EQ(a.Status(0.0).max_hold_s, 600.0);
}

TEST(TrainerMismatch, InFlightPastConcurrencyTimesEnginesForTwoReportsIsFlagged) {
  Fixed c;
  c.concurrency = 8;
  Agent a(Config(), c);
  a.Report(R(0, control::Phase::kRollout, std::nullopt, 0, 2), 0.0);
  a.Tick(0.5, At(0.5));
  ASSERT_EQ(a.actuation().concurrency, 8);
  // 2 engines x 8 = 16 allowed.
  a.Report(R(0, control::Phase::kRollout, std::nullopt, 16, 2), 1.0);
  a.Report(R(0, control::Phase::kRollout, std::nullopt, 17, 2), 2.0);  // one over
  a.Report(R(0, control::Phase::kRollout, std::nullopt, 16, 2), 3.0);
  EXPECT_FALSE(a.mismatch().in_flight);
  a.Report(R(0, control::Phase::kRollout, std::nullopt, 24, 2), 4.0);
  a.Report(R(0, control::Phase::kRollout, std::nullopt, 24, 2), 5.0);
  EXPECT_TRUE(a.mismatch().in_flight);
  EXPECT_EQ(a.mismatch().in_flight_trainer, 24);
  EXPECT_EQ(a.mismatch().in_flight_allowed, 16);
  auto warned = Messages(a, LogLevel::kWarn);
  ASSERT_EQ(warned.size(), 1u);
  EXPECT_THAT(warned[0],
              HasSubstr("24 sequences in flight but concurrency 8 x 2 engines allows 16"));
  // From then on the controller sees the trainer's in-flight per engine: 24 / 2 = 12.
  a.Tick(5.5, At(5.5));
  EXPECT_EQ(c.last.concurrency, 12);
}

TEST(TrainerMismatch, ALoweredCapLetsWhatRunsDrainButNotRise) {
  Fixed c;
  c.concurrency = 16;
  Agent a(Config(), c);
  a.Report(R(0, control::Phase::kRollout, std::nullopt, 0), 0.0);
  a.Tick(0.5, At(0.5));
  a.Report(R(0, control::Phase::kRollout, std::nullopt, 16), 1.0);
  c.concurrency = 4;
  a.Tick(1.5, At(1.5));  // the cap falls to 4 with 16 running
  ASSERT_EQ(a.actuation().concurrency, 4);
  // Draining: 16, 16 (none finished yet), 12, 9 — never over.
  for (int n : {16, 16, 12, 9}) a.Report(R(0, control::Phase::kRollout, std::nullopt, n), 2.0);
  EXPECT_FALSE(a.mismatch().in_flight);
  // Admitting while above the cap: 10 after 9, twice.
  a.Report(R(0, control::Phase::kRollout, std::nullopt, 10), 3.0);
  a.Report(R(0, control::Phase::kRollout, std::nullopt, 10), 4.0);
  EXPECT_TRUE(a.mismatch().in_flight);
  EXPECT_EQ(a.mismatch().in_flight_allowed, 9);
}

TEST(TrainerMismatch, ADrainLastsNoLongerThanTheReportTimeout) {
  Fixed c;
  c.concurrency = 16;
  Agent a(Config(), c);
  a.Report(R(0, control::Phase::kRollout, std::nullopt, 16), 0.0);
  a.Tick(0.5, At(0.5));
  c.concurrency = 4;
  a.Tick(1.0, At(1.0));
  a.Report(R(0, control::Phase::kRollout, std::nullopt, 16), 30.0);
  a.Report(R(0, control::Phase::kRollout, std::nullopt, 16), 60.0);
  EXPECT_FALSE(a.mismatch().in_flight);
  // 61 s after the cap fell, 16 still in flight: a trainer that kept its own cap.
  a.Report(R(0, control::Phase::kRollout, std::nullopt, 16), 62.0);
  a.Report(R(0, control::Phase::kRollout, std::nullopt, 16), 63.0);
  EXPECT_TRUE(a.mismatch().in_flight);
}

TEST(TrainerMismatch, AnAdapterThatAdmitsOtherwiseThanThePolicyLearnedIsSaid) {
  Fixed c;
  AgentConfig config = Config();
  config.policy_admission = "continuous";
  Agent a(config, c);
  TrainerReport r = R(0, control::Phase::kRollout);
  r.admission = "continuous";
  a.Report(r, 0.0);
  EXPECT_FALSE(a.mismatch().admission);
  r.admission = "chunked";
  a.Report(r, 1.0);
  EXPECT_TRUE(a.mismatch().admission);
  auto warned = Messages(a, LogLevel::kWarn);
  ASSERT_EQ(warned.size(), 1u);
  EXPECT_THAT(warned[0], HasSubstr("'chunked' but the policy was trained for 'continuous'"));
  EXPECT_THAT(MetricsText(a.Status(1.0)),
              HasSubstr("headroom_trainer_mismatch{kind=\"admission\"} 1\n"));
}

TEST(TrainerReportParse, TheNewFieldsAndEvalAreTakenAndEveryBadOneNamed) {
  auto r = ParseReport(
      R"({"step": 2, "phase": "eval", "tokens": 5, "in_flight": 3, "progress": 0.25,
          "group_size": 8, "engines": 4, "admission": "chunked"})");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->phase, control::Phase::kRollout);  // the controller's phase
  EXPECT_TRUE(r->eval);
  EXPECT_EQ(ReportedPhaseName(*r), "eval");
  EXPECT_EQ(r->engines, 4);
  EXPECT_EQ(r->admission, "chunked");
  const std::string base = R"("step": 2, "phase": "rollout", "tokens": 5, "in_flight": 3)";
  for (const auto& [extra, field] :
       std::vector<std::pair<std::string, std::string>>{{R"("engines": 0)", "engines"},
                                                        {R"("engines": 1.5)", "engines"},
                                                        {R"("engines": "2")", "engines"},
                                                        {R"("admission": "batched")", "admission"},
                                                        {R"("admission": 1)", "admission"}}) {
    auto bad = ParseReport("{" + base + ", " + extra + "}");
    ASSERT_FALSE(bad.ok()) << extra;
    EXPECT_THAT(bad.error().message(), HasSubstr("field '" + field + "'")) << extra;
  }
  auto bad = ParseReport(R"({"step": 2, "phase": "evaluate", "tokens": 5, "in_flight": 3})");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error().message(), HasSubstr("checkpoint, stopped, eval"));
}

TEST(TrainerReportParse, TheStatusSaysTheTrainersStateAndTheLongestHold) {
  Fixed c;
  Agent a(Config(), c);
  auto j = nlohmann::json::parse(StatusJson(a.Status(0.0)));
  EXPECT_EQ(j["trainer"]["state"], "never");
  EXPECT_TRUE(j["trainer"]["last_report_unix_s"].is_null());
  EXPECT_EQ(j["max_hold_s"], 300.0);
  EXPECT_THAT(MetricsText(a.Status(0.0)), HasSubstr("headroom_trainer_up NaN\n"));
  TrainerReport r = R(1, control::Phase::kRollout, 8, 3, 2);
  r.eval = true;
  a.Report(r, 1.0, 1.7e9);
  j = nlohmann::json::parse(StatusJson(a.Status(2.0)));
  EXPECT_EQ(j["trainer"]["state"], "reporting");
  EXPECT_EQ(j["trainer"]["last_report_unix_s"], 1.7e9);
  EXPECT_EQ(j["report"]["phase"], "eval");
  EXPECT_EQ(j["report"]["engines"], 2);
  EXPECT_EQ(j["report"]["group_size"], 8);
  EXPECT_TRUE(j["report"]["admission"].is_null());
  EXPECT_EQ(j["trainer"]["mismatch"]["any"], false);
  EXPECT_THAT(MetricsText(a.Status(2.0)), HasSubstr("headroom_trainer_up 1\n"));
  EXPECT_THAT(MetricsText(a.Status(62.0)), HasSubstr("headroom_trainer_up 0\n"));
}

}  // namespace
}  // namespace headroom::agent::trainer_presence
