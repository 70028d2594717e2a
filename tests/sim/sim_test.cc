#include <gmock/gmock.h>

#include <gtest/gtest.h>
#include <cmath>

#include "control/baselines.h"
#include "sim/budget_plan.h"
#include "sim/episode.h"
#include "sim/evaluate.h"
#include "sim/train.h"
#include "twin/scenario.h"

namespace headroom::sim {
namespace {

twin::Scenario Load(const char* name) {
  auto s = twin::LoadScenario(name);
  EXPECT_TRUE(s.ok());
  return *s;
}

// With 0.1 s ticks and 0.5 s intervals from t = 0, every 0.5 s window is one interval: the
// violation fraction at 0.5 s must be the share of recorded interval means above the budget.
TEST(Episode, HalfSecondViolationsAreTheIntervalsOverBudget) {
  const twin::Scenario s = Load("a100-7b-tp1");
  control::Uncontrolled u(s.concurrency, s.group_size);
  EpisodeOptions o;
  o.steps = 3;
  o.record_power = true;
  const EpisodeResult r = RunEpisode(s, 300.0, 7, u, o);
  ASSERT_GT(r.power_w.size(), 100u);
  size_t over = 0;
  for (float p : r.power_w) over += p > 300.0f ? 1 : 0;
  EXPECT_EQ(r.windows[0], r.power_w.size());
  EXPECT_NEAR(r.violation_fraction[0], double(over) / r.power_w.size(), 1e-12);
  EXPECT_EQ(r.steps_done, 3);
  EXPECT_NEAR(r.duration_s, r.power_w.size() * 0.5, 1e-9);
  double mean_w = 0.0;
  for (float p : r.power_w) mean_w += p / r.power_w.size();
  EXPECT_NEAR(r.energy_j, mean_w * r.duration_s, 1e-3 * r.energy_j);
  EXPECT_GT(r.tokens, 0.0);
}

TEST(Episode, SameSeedSameResult) {
  const twin::Scenario s = Load("a100-72b-tp4");
  control::Pid a({2.0, 1.0, 0.05, {}}, {2, 8}, 8, 8), b({2.0, 1.0, 0.05, {}}, {2, 8}, 8, 8);
  EpisodeOptions o;
  o.horizon_s = 120.0;
  const EpisodeResult x = RunEpisode(s, 149.8, 3, a, o), y = RunEpisode(s, 149.8, 3, b, o);
  EXPECT_EQ(x.tokens, y.tokens);
  EXPECT_EQ(x.energy_j, y.energy_j);
}

// 7B at the paper's budget, 2 seeds of 4 steps, searches kept small.
EvalConfig Small7B() {
  EvalConfig c;
  c.scenario = Load("a100-7b-tp1");
  c.budget_w = 314.6;
  c.seeds = 2;
  c.steps = 4;
  c.search_steps = 4;
  c.calibration_seeds = 1;
  return c;
}

TEST(Evaluate, ComparesOnTheSameHorizonAndChecksNames) {
  EvalConfig c = Small7B();
  c.controllers = {"uncontrolled", "static-safe", "power-cap"};
  auto r = Evaluate(c);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(r->controllers.size(), 3u);
  EXPECT_EQ(*r->controllers[0].tokens_vs_uncontrolled_pct, 0.0);
  EXPECT_EQ(*r->controllers[1].tokens_vs_static_safe_pct, 0.0);
  // Every controller runs exactly the uncontrolled time of 4 steps on each seed.
  for (const auto& e : r->controllers) {
    for (int i = 0; i < 2; ++i) EXPECT_NEAR(e.runs[i].duration_s, r->horizon_s[i], 0.5);
  }
  EXPECT_EQ(r->controllers[0].runs[0].steps_done, 4);
  c.controllers = {"uncontrolled", "bang-bang"};
  auto bad = Evaluate(c);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error().message(), ::testing::HasSubstr("unknown controller 'bang-bang'"));
  c.controllers = {"ppo"};
  EXPECT_FALSE(Evaluate(c).ok());  // no policy
}

// The source paper's framing: every controller runs exactly the steps asked for, however long
// they take; tokens and energy are those steps' (checked against an episode run by hand).
TEST(Evaluate, UnderTheStepsHorizonEveryControllerRunsTheSameSteps) {
  EvalConfig c = Small7B();
  c.horizon = Horizon::kSteps;
  c.controllers = {"uncontrolled", "static-safe", "power-cap"};
  auto r = Evaluate(c);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->horizon, Horizon::kSteps);
  for (const auto& e : r->controllers) {
    for (const auto& run : e.runs) EXPECT_EQ(run.steps_done, 4) << e.name;
  }
  // Uncontrolled: its steps take the horizon's time, by the horizon's definition; static-safe's
  // larger groups make longer steps with more tokens each.
  for (int i = 0; i < 2; ++i)
    EXPECT_NEAR(r->controllers[0].runs[i].duration_s, r->horizon_s[i], 0.5);
  EXPECT_GT(r->controllers[1].runs[0].duration_s, r->horizon_s[0] + 1.0)
      << r->controllers[1].setting;
  control::PowerCap cap(c.scenario.concurrency, c.scenario.group_size);
  EpisodeOptions o;
  o.steps = 4;
  o.horizon_s = 20.0 * r->horizon_s[0];
  const EpisodeResult by_hand = RunEpisode(c.scenario, c.budget_w, 1, cap, o);
  EXPECT_EQ(r->controllers[2].runs[0].tokens, by_hand.tokens);
  EXPECT_EQ(r->controllers[2].runs[0].energy_j, by_hand.energy_j);
  EXPECT_EQ(ParseHorizon("steps").value(), Horizon::kSteps);
  EXPECT_THAT(ParseHorizon("epochs").error().message(),
              ::testing::HasSubstr("--horizon: 'epochs' is not time or steps"));
}

// How often and how deep the hardware limit is used: the power cap holds it at the budget every
// interval (depth 1 - budget / nameplate); the uncontrolled trainer never sets one.
TEST(Episode, PowerLimitUseIsCountedPerInterval) {
  const twin::Scenario s = Load("a100-7b-tp1");
  EpisodeOptions o;
  o.steps = 2;
  control::PowerCap cap(s.concurrency, s.group_size);
  const EpisodeResult capped = RunEpisode(s, 314.6, 1, cap, o);
  EXPECT_DOUBLE_EQ(capped.limit_fraction, 1.0);
  EXPECT_NEAR(capped.limit_depth, 1.0 - 314.6 / 400.0, 1e-12);
  control::Uncontrolled u(s.concurrency, s.group_size);
  const EpisodeResult free = RunEpisode(s, 314.6, 1, u, o);
  EXPECT_EQ(free.limit_fraction, 0.0);
  EXPECT_EQ(free.limit_depth, 0.0);
}

TEST(BudgetPlan, GeneratorsAreSeededBoundedAndOnControlIntervals) {
  auto steps = ParseBudgetGenerator("steps:280:400:300");
  ASSERT_TRUE(steps.ok() && steps->has_value());
  const BudgetPlan p = MakeBudgetPlan(**steps, 350.0, {260.0, 400.0}, 1000.0, 1, 0.5);
  // 400 from 0, 280 from 300, 400 from 600, 280 from 900 (<= 1000 - 60: the last minute moves
  // nothing).
  ASSERT_EQ(p.per_gpu_w.points().size(), 4u);
  EXPECT_EQ(p.per_gpu_w.At(0.0), 400.0);
  EXPECT_EQ(p.per_gpu_w.At(300.0), 280.0);
  EXPECT_EQ(p.per_gpu_w.At(650.0), 400.0);
  EXPECT_EQ(p.per_gpu_w.At(999.0), 280.0);
  EXPECT_EQ(p.notice_s, 0.0);
  for (const char* bad : {"steps:1:2", "steps:300:200:60", "steps:a:400:60", "steps:300:400:0",
                          "steps:300:400:60:1"}) {
    auto r = ParseBudgetGenerator(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.error().message(), ::testing::HasSubstr("steps:LOW_W:HIGH_W:PERIOD_S")) << bad;
  }
  EXPECT_FALSE(ParseBudgetGenerator("budgets.csv")->has_value());  // a file
  for (const char* name : {"demand-response", "walk"}) {
    auto spec = ParseBudgetGenerator(name);
    ASSERT_TRUE(spec.ok() && spec->has_value()) << name;
    const BudgetPlan a = MakeBudgetPlan(**spec, 400.0, {300.0, 400.0}, 7200.0, 3, 0.5);
    const BudgetPlan b = MakeBudgetPlan(**spec, 400.0, {300.0, 400.0}, 7200.0, 3, 0.5);
    const BudgetPlan c = MakeBudgetPlan(**spec, 400.0, {300.0, 400.0}, 7200.0, 4, 0.5);
    ASSERT_GT(a.per_gpu_w.points().size(), 2u) << name;
    EXPECT_EQ(a.per_gpu_w.points().size(), b.per_gpu_w.points().size()) << name;
    bool same_as_c = a.per_gpu_w.points().size() == c.per_gpu_w.points().size();
    for (size_t i = 0; i < a.per_gpu_w.points().size(); ++i) {
      const auto& pt = a.per_gpu_w.points()[i];
      EXPECT_EQ(pt.budget_w, b.per_gpu_w.points()[i].budget_w) << name;  // the seed decides
      EXPECT_GE(pt.budget_w, 300.0) << name;  // never below the range (cut there)
      EXPECT_LE(pt.budget_w, 400.0) << name;
      EXPECT_NEAR(std::fmod(pt.t_s, 0.5), 0.0, 1e-9) << name;  // on a control interval
      EXPECT_LT(pt.t_s, 7200.0 - 60.0 + 1e-9) << name;
      if (same_as_c && pt.budget_w != c.per_gpu_w.points()[i].budget_w) same_as_c = false;
    }
    EXPECT_FALSE(same_as_c) << name;  // another seed, another plan
  }
  // Demand response: drops of 10-30 % from the base, announced 10 s ahead.
  const BudgetPlan dr = MakeBudgetPlan(**ParseBudgetGenerator("demand-response"), 400.0,
                                       {200.0, 400.0}, 20000.0, 5, 0.5);
  EXPECT_EQ(dr.notice_s, 10.0);
  for (const auto& pt : dr.per_gpu_w.points()) {
    EXPECT_TRUE(pt.budget_w == 400.0 || (pt.budget_w >= 280.0 - 0.05 && pt.budget_w <= 360.05))
        << pt.budget_w;
  }
}

TEST(Episode, UnderAMovingBudgetEachDecisionSeesTheBudgetInForceAndDecreasesAreTimed) {
  const twin::Scenario s = Load("a100-7b-tp1");
  // A controller that records the budgets it was given.
  class Recording final : public control::Controller {
   public:
    std::string_view name() const override { return "recording"; }
    control::Command Decide(const control::Inputs& in) override {
      seen.emplace_back(in.t_s, in.budget_w);
      return {4, 8, {}};
    }
    std::vector<std::pair<double, double>> seen;
  } rec;
  const analysis::BudgetSchedule plan({{0.0, 400.0}, {60.0, 30.0}, {120.0, 400.0}});
  EpisodeOptions o;
  o.horizon_s = 180.0;
  o.budget = &plan;
  o.record_power = true;
  const EpisodeResult r = RunEpisode(s, 400.0, 2, rec, o);
  ASSERT_FALSE(rec.seen.empty());
  for (const auto& [t, b] : rec.seen) EXPECT_EQ(b, t < 60.0 || t >= 120.0 ? 400.0 : 30.0) << t;
  ASSERT_EQ(r.budget_w.size(), r.power_w.size());
  // 30 W per GPU is below anything the job draws (idle is 56 W): the one decrease never
  // settles, and the 0.5 s windows of [60, 120) are all over it.
  EXPECT_TRUE(r.settled_s.empty());
  EXPECT_EQ(r.unsettled, 1u);
  size_t over = 0, under_high = 0;
  for (size_t i = 0; i < r.power_w.size(); ++i) {
    if (r.budget_w[i] == 30.0) over += r.power_w[i] > 30.0f;
    if (r.budget_w[i] == 400.0) under_high += r.power_w[i] <= 400.0f;
  }
  EXPECT_EQ(over, 120u);  // 60 s of 0.5 s intervals
  EXPECT_NEAR(r.violation_fraction[0],
              static_cast<double>(over + (r.power_w.size() - 120 - under_high)) /
                  static_cast<double>(r.windows[0]),
              1e-12);
}

TEST(Evaluate, UnderAScheduleTheTwoReferencesAndSettleAreReported) {
  EvalConfig c;
  c.scenario = Load("a100-7b-tp1");
  c.budget_w = 400.0;
  c.seeds = 2;
  c.steps = 6;
  c.search_steps = 3;
  c.calibration_seeds = 1;
  c.controllers = {"uncontrolled", "static-safe-lowest", "static-oracle"};
  auto spec = ParseBudgetGenerator("steps:300:400:60");
  c.schedule = **spec;
  auto r = Evaluate(c);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_TRUE(r->schedule.has_value());
  EXPECT_EQ(r->schedule->lowest_w, 300.0);
  EXPECT_EQ(r->schedule->highest_w, 400.0);
  ASSERT_EQ(r->oracle.size(), 2u);  // two levels: each searched
  EXPECT_EQ(r->oracle[0].budget_w, 300.0);
  EXPECT_EQ(r->static_safe_lowest->concurrency, r->oracle[0].setting.concurrency);
  ASSERT_EQ(r->controllers.size(), 3u);
  for (const auto& e : r->controllers) {
    ASSERT_TRUE(e.settle.has_value()) << e.name;
    EXPECT_EQ(e.settle->events, static_cast<size_t>(r->schedule->decreases)) << e.name;
  }
  EXPECT_EQ(*r->controllers[1].tokens_vs_static_safe_lowest_pct, 0.0);
  EXPECT_EQ(*r->controllers[2].tokens_vs_static_oracle_pct, 0.0);
  // The references need a schedule.
  c.schedule.reset();
  auto bad = Evaluate(c);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error().message(), ::testing::HasSubstr("give --budget-schedule"));
}

TEST(StaticSafe, PicksTheMostTokensWithinTheTarget) {
  const twin::Scenario s = Load("a100-72b-tp4");
  // A budget above every setting's power: the largest concurrency wins. Below even the pause
  // between batches: none meets the target, all tie at 100 % and the most tokens win the tie.
  const StaticSafe high = SearchStaticSafe(s, 170.0, 0.01, 1, 2, 2);
  EXPECT_TRUE(high.meets_target);
  EXPECT_EQ(high.concurrency, 8);
  const StaticSafe low = SearchStaticSafe(s, 60.0, 0.01, 1, 2, 2);
  EXPECT_FALSE(low.meets_target);
  EXPECT_EQ(low.violation_fraction, 1.0);
  EXPECT_EQ(low.concurrency, 8);
}

TEST(Train, TwoIterationSmokeIsDeterministic) {
  TrainConfig c;
  c.scenarios = {Load("a100-7b-tp1")};
  c.envs = 2;
  c.steps_per_env = 64;
  c.timesteps = 256;
  c.hidden = {16};
  c.ppo.minibatch = 32;
  c.ppo.epochs = 2;
  int iterations = 0;
  IterationLog last;
  auto clock = [] { return 0.0; };
  const control::Policy a = Train(c, clock, [&](const IterationLog& l) {
    ++iterations;
    last = l;
  });
  EXPECT_EQ(iterations, 2);
  EXPECT_EQ(last.timesteps, 256);
  EXPECT_TRUE(std::isfinite(last.approx_kl));
  EXPECT_GE(last.violation_rate, 0.0);
  EXPECT_LE(last.violation_rate, 1.0);
  EXPECT_GT(last.entropy, 0.0);
  const control::Policy b = Train(c, clock, nullptr);
  EXPECT_TRUE(a.net.actor().Parameters().isApprox(b.net.actor().Parameters(), 0.0));
  EXPECT_EQ(a.trained_on, std::vector<std::string>{"a100-7b-tp1"});
}

// A policy trained in a scenario of chunked admission records it in that scenario's envelope
// (control::TrainedAdmission reads it back); continuous scenarios record continuous.
TEST(Train, ThePolicyRecordsTheAdmissionOfEachScenario) {
  twin::Scenario chunked = Load("a100-14b-tp2");
  chunked.admission = twin::Admission::kChunked;
  EXPECT_EQ(EnvelopeOf(chunked, chunked.budget_range_w).admission, control::Admission::kChunked);
  const twin::Scenario continuous = Load("a100-7b-tp1");
  EXPECT_EQ(EnvelopeOf(continuous, continuous.budget_range_w).admission,
            control::Admission::kContinuous);

  TrainConfig c;
  c.scenarios = {chunked, continuous};
  c.envs = 2;
  c.steps_per_env = 32;
  c.timesteps = 64;
  c.hidden = {8};
  c.ppo.minibatch = 32;
  c.ppo.epochs = 1;
  const auto clock = [] { return 0.0; };
  const control::Policy p = Train(c, clock, nullptr);
  ASSERT_EQ(p.envelopes.size(), 2u);
  EXPECT_EQ(p.envelopes[0].admission, control::Admission::kChunked);
  EXPECT_EQ(p.envelopes[1].admission, control::Admission::kContinuous);
  EXPECT_EQ(control::TrainedAdmission(p), std::nullopt);  // they differ
  c.scenarios = {chunked};
  EXPECT_EQ(control::TrainedAdmission(Train(c, clock, nullptr)), control::Admission::kChunked);
}

}  // namespace
}  // namespace headroom::sim
