#include <gtest/gtest.h>

#include <vector>

#include "control/actuators.h"
#include "control/baselines.h"
#include "control/features.h"
#include "control/limit_assist.h"

namespace headroom::control {
namespace {

Inputs At(double t_s, double power_w, Phase phase, int concurrency, double budget_w = 300.0) {
  static std::vector<double> power(1);
  power[0] = power_w;
  Inputs in;
  in.t_s = t_s;
  in.interval_s = 0.5;
  in.budget_w = budget_w;
  in.smoothed_power_w = power;
  in.phase = phase;
  in.concurrency = concurrency;
  in.group_size = 8;
  in.next_group_size = 8;
  return in;
}

TEST(Actuators, ClampRateLimitAndPowerLimit) {
  ActuatorLimits l;
  l.concurrency = {1, 16};
  l.group_size = {4, 16};
  l.nameplate_w = 400.0;
  l.power_limit_min_w = 100.0;
  Applied cur;
  cur.concurrency = 2;
  cur.group_size = 8;
  // Up from 2 at most x2 per interval: 4.
  Applied a = ApplyLimits(l, cur, {16, 20, 50.0});
  EXPECT_EQ(a.concurrency, 4);
  EXPECT_TRUE(a.concurrency_clamped);
  EXPECT_EQ(a.group_size, 16);
  EXPECT_TRUE(a.group_size_clamped);
  EXPECT_EQ(a.power_limit_w, 100.0);  // below the lowest limit: the lowest
  // Down at once, to the range's floor.
  cur.concurrency = 16;
  a = ApplyLimits(l, cur, {0, std::nullopt, 400.0});
  EXPECT_EQ(a.concurrency, 1);
  EXPECT_EQ(a.group_size, 8);       // unset: kept
  EXPECT_EQ(a.power_limit_w, 0.0);  // at nameplate: none
  cur.concurrency = 1;
  EXPECT_EQ(ApplyLimits(l, cur, {16, {}, {}}).concurrency, 2);  // +1 at least
}

TEST(Actuators, APowerLimitFallsAtOnceAndRisesAtItsRate) {
  ActuatorLimits l;
  l.concurrency = {1, 16};
  l.group_size = {4, 16};
  l.nameplate_w = 400.0;
  l.power_limit_min_w = 100.0;
  l.power_limit_rise_w = 20.0;
  Applied cur;
  cur.concurrency = 4;
  cur.group_size = 8;
  // From none to 250 W: a fall, at once.
  Applied a = ApplyLimits(l, cur, {{}, {}, 250.0});
  EXPECT_EQ(a.power_limit_w, 250.0);
  EXPECT_FALSE(a.power_limit_clamped);
  // Up to 300 W: 20 W per interval.
  a = ApplyLimits(l, a, {{}, {}, 300.0});
  EXPECT_EQ(a.power_limit_w, 270.0);
  EXPECT_TRUE(a.power_limit_clamped);
  // Lifting (0) is a rise to nameplate: 290 W, then at 390 W the next step reaches nameplate.
  a = ApplyLimits(l, a, {{}, {}, 0.0});
  EXPECT_EQ(a.power_limit_w, 290.0);
  a.power_limit_w = 385.0;
  a = ApplyLimits(l, a, {{}, {}, 0.0});
  EXPECT_EQ(a.power_limit_w, 0.0);
  // Down again at once; unset keeps it.
  a = ApplyLimits(l, a, {{}, {}, 150.0});
  EXPECT_EQ(a.power_limit_w, 150.0);
  EXPECT_EQ(ApplyLimits(l, a, {}).power_limit_w, 150.0);
}

TEST(LimitAssist, HoldsAnUpdateAboveTheBudgetAndRemembersItPerPhase) {
  LimitAssistRule rule;  // margin 4 %, gain 1, 20 W/s
  LimitAssist assist(rule, 400.0, 100.0);
  const double budget_w = 300.0;
  const double target_w = 288.0;  // 300 x 0.96
  // A train phase at 380 W: the first excess sets the limit at the target less the excess.
  EXPECT_NEAR(assist.Decide(At(0.0, 380.0, Phase::kTrain, 4, budget_w), false), 288.0 - 92.0, 1e-9);
  // Under that limit the power reads 196 W: below the target, the limit rises by 10 W a
  // 0.5 s interval; at 290 W (2 over) it falls by 2.
  EXPECT_NEAR(assist.Decide(At(0.5, 196.0, Phase::kTrain, 4, budget_w), false), 206.0, 1e-9);
  EXPECT_NEAR(assist.Decide(At(1.0, 290.0, Phase::kTrain, 4, budget_w), false), 204.0, 1e-9);
  for (int i = 0; i < 40; ++i) assist.Decide(At(1.5 + 0.5 * i, target_w, Phase::kTrain, 4), false);
  // Rollout above the floor: the workload has authority; the limit is lifted (the actuators
  // raise it at their rate).
  EXPECT_EQ(assist.Decide(At(30.0, 250.0, Phase::kRollout, 8, budget_w), true), 0.0);
  // The next train phase starts at the limit the last one ended with, before any excess (the
  // power read on entering is still the rollout's); then the loop runs again.
  EXPECT_NEAR(assist.Decide(At(50.0, 250.0, Phase::kTrain, 8, budget_w), false), 204.0, 1e-9);
  EXPECT_NEAR(assist.Decide(At(50.5, 250.0, Phase::kTrain, 8, budget_w), false), 214.0, 1e-9);
  // A phase that never needed one gets none; Reset forgets.
  EXPECT_EQ(assist.Decide(At(60.0, 100.0, Phase::kSync, 8, budget_w), false), 0.0);
  assist.Reset();
  EXPECT_EQ(assist.Decide(At(70.0, 250.0, Phase::kTrain, 8, budget_w), false), 0.0);
}

TEST(LimitAssist, APidWithANameplateUsesItOutsideRolloutOnly) {
  PidGains g{2.0, 1.0, 0.0, {}};
  Pid hybrid(g, {1, 16}, 8, 8, 400.0, 100.0);
  Pid workload_only(g, {1, 16}, 8, 8);
  EXPECT_GT(*hybrid.Decide(At(0.0, 380.0, Phase::kTrain, 8)).power_limit_w, 0.0);
  EXPECT_EQ(*workload_only.Decide(At(0.0, 380.0, Phase::kTrain, 8)).power_limit_w, 0.0);
  hybrid.Reset();
  // In rollout above the floor the PID cuts concurrency instead.
  const Command c = hybrid.Decide(At(0.0, 380.0, Phase::kRollout, 8));
  EXPECT_EQ(*c.power_limit_w, 0.0);
  EXPECT_LT(*c.concurrency, 8);
  // At the floor it may use the limit.
  hybrid.Reset();
  EXPECT_GT(*hybrid.Decide(At(0.0, 380.0, Phase::kRollout, 1)).power_limit_w, 0.0);
  g.assist.enabled = false;
  Pid disabled(g, {1, 16}, 8, 8, 400.0, 100.0);
  EXPECT_EQ(*disabled.Decide(At(0.0, 380.0, Phase::kTrain, 8)).power_limit_w, 0.0);
}

TEST(Baselines, UncontrolledStaticAndPowerCapIgnorePower) {
  Uncontrolled u(256, 8);
  PowerCap cap(256, 8);
  Static s("static-safe", 6, 16);
  for (double p : {100.0, 500.0}) {
    const Inputs in = At(0.0, p, Phase::kRollout, 256, 314.6);
    EXPECT_EQ(*u.Decide(in).concurrency, 256);
    EXPECT_EQ(*u.Decide(in).power_limit_w, 0.0);
    EXPECT_EQ(*cap.Decide(in).power_limit_w, 314.6);
    EXPECT_EQ(*s.Decide(in).concurrency, 6);
    EXPECT_EQ(*s.Decide(in).group_size, 16);
  }
}

// PI on log2 concurrency, by hand: kp 2, ki 1/s, margin 0, range [1, 16], start 16 (I = 4).
TEST(Pid, ScriptedPowerSequence) {
  Pid pid({2.0, 1.0, 0.0, {}}, {1, 16}, 16, 8);
  // Over budget in rollout: e = (300 - 330) / 300 = -0.1; I = 4 - 0.1 x 0.5 = 3.95;
  // u = 3.95 - 0.2 = 3.75; 2^3.75 = 13.45 -> 13.
  EXPECT_EQ(*pid.Decide(At(0.0, 330.0, Phase::kRollout, 16)).concurrency, 13);
  EXPECT_EQ(*pid.Decide(At(0.0, 330.0, Phase::kRollout, 16)).group_size, 8);  // I = 3.9 now
  // Outside rollout the integral holds (3.9): u = 3.9 - 0.2 = 3.7; 2^3.7 = 13.0 -> 13.
  EXPECT_EQ(*pid.Decide(At(1.0, 330.0, Phase::kTrain, 13)).concurrency, 13);
  EXPECT_EQ(*pid.Decide(At(1.5, 330.0, Phase::kTrain, 13)).concurrency, 13);
  // Far below: e = 1/3, I + kp e = 3.9 + 0.667 > 4 (saturated high, e > 0): no integration,
  // u = 4 -> 16, and the integral stays 3.9: at e = 0, u = 3.9 -> 2^3.9 = 14.9 -> 15.
  EXPECT_EQ(*pid.Decide(At(2.0, 200.0, Phase::kRollout, 13)).concurrency, 16);
  EXPECT_EQ(*pid.Decide(At(2.5, 300.0, Phase::kRollout, 16)).concurrency, 15);
  pid.Reset();
  EXPECT_EQ(*pid.Decide(At(0.0, 300.0, Phase::kRollout, 16)).concurrency, 16);
}

TEST(Pid, AntiWindupStopsIntegratingWhenTheOutputSaturates) {
  Pid pid({1.0, 4.0, 0.0, {}}, {2, 16}, 16, 8);  // log2 range [1, 4], I starts at 4
  // Far over budget, e = -1. First interval: I + kp e = 3 is inside: I = 4 - 4 x 0.5 = 2.
  // From then on I + kp e = 1 is saturated low with e < 0: I stays 2 however long it lasts.
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(*pid.Decide(At(i * 0.5, 600.0, Phase::kRollout, 2)).concurrency, 2);
  }
  // At the setpoint (e = 0) the output is 2^I = 4 at once: no wound-up integral to unwind.
  EXPECT_EQ(*pid.Decide(At(50.0, 300.0, Phase::kRollout, 2)).concurrency, 4);
  // e = +0.5: I = 2 + 4 x 0.5 x 0.5 = 3, u = 3.5 -> 11.3 -> 11; then at the setpoint 2^3 = 8.
  EXPECT_EQ(*pid.Decide(At(50.5, 150.0, Phase::kRollout, 4)).concurrency, 11);
  EXPECT_EQ(*pid.Decide(At(51.0, 300.0, Phase::kRollout, 11)).concurrency, 8);
}

class Fixed final : public Controller {
 public:
  std::string_view name() const override { return "fixed"; }
  Command Decide(const Inputs& in) override {
    seen_budget_w = in.budget_w;
    return {16, 8, {}};
  }
  double seen_budget_w = 0.0;
};

// Rule: margin 2 %, sustain 2 intervals, cut x0.5, hold 5 s. Budget 300: threshold 306 W.
TEST(Shield, SustainedExcessCutsAndHoldsAndOutsideRolloutBoundsAdmission) {
  Fixed inner;
  Shield shield(inner, {0.02, 2, 0.5, 5.0}, {1, 16});
  shield.Reset();
  Command c = shield.Decide(At(0.0, 310.0, Phase::kRollout, 16));  // 1 over
  EXPECT_EQ(*c.concurrency, 16);
  EXPECT_FALSE(c.power_limit_w.has_value());
  EXPECT_EQ(*shield.Decide(At(0.5, 305.0, Phase::kRollout, 16)).concurrency, 16);  // under: reset
  EXPECT_EQ(*shield.Decide(At(1.0, 310.0, Phase::kRollout, 16)).concurrency, 16);
  c = shield.Decide(At(1.5, 310.0, Phase::kRollout, 16));  // sustained: cut (no limit)
  EXPECT_EQ(*c.concurrency, 8);
  EXPECT_FALSE(c.power_limit_w.has_value());
  EXPECT_EQ(shield.interventions(), 1);
  EXPECT_EQ(*shield.Decide(At(6.0, 200.0, Phase::kRollout, 8)).concurrency, 8);   // held
  EXPECT_EQ(*shield.Decide(At(6.5, 200.0, Phase::kRollout, 8)).concurrency, 16);  // released
  // Outside rollout: no cut however high the power, but concurrency is bounded by what the
  // next rollout may admit at once: the last rollout's mean concurrency
  // (16 x 4 + 8 x 2) / 6 = 13.3, scaled by the budget since.
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(*shield.Decide(At(10.0 + i, 390.0, Phase::kTrain, 16)).concurrency, 13);
  }
  EXPECT_EQ(*shield.Decide(At(15.0, 100.0, Phase::kSync, 16, 150.0)).concurrency, 6);  // x 1/2
  EXPECT_EQ(shield.interventions(), 1);
}

TEST(Shield, ADecreaseCutsAtOnceAndEverythingAimsAMarginBelowWhileSettling) {
  Fixed inner;
  Shield shield(inner, {0.02, 2, 0.5, 5.0}, {1, 16});
  shield.Reset();
  EXPECT_EQ(*shield.Decide(At(0.0, 250.0, Phase::kRollout, 16)).concurrency, 16);
  EXPECT_EQ(inner.seen_budget_w, 300.0);
  // Down to 200 W with the power at 250: cut at once, the limit at 200 x 0.98 x 0.98 (the
  // budget aimed at while settling, less the margin), the inner controller sees 196 W.
  Command c = shield.Decide(At(0.5, 250.0, Phase::kRollout, 16, 200.0));
  EXPECT_EQ(*c.concurrency, 8);
  EXPECT_DOUBLE_EQ(*c.power_limit_w, 200.0 * 0.98 * 0.98);
  EXPECT_DOUBLE_EQ(inner.seen_budget_w, 196.0);
  EXPECT_EQ(shield.interventions(), 1);
  // While settling any excess over the budget counts at once (no margin, no sustain).
  EXPECT_EQ(*shield.Decide(At(1.0, 199.0, Phase::kRollout, 8, 200.0)).concurrency, 8);
  EXPECT_EQ(*shield.Decide(At(1.5, 201.0, Phase::kRollout, 8, 200.0)).concurrency, 4);
  EXPECT_EQ(shield.interventions(), 2);
  // The limit stays until the phase ends, then is lifted once.
  c = shield.Decide(At(2.0, 150.0, Phase::kTrain, 4, 200.0));
  EXPECT_DOUBLE_EQ(*c.power_limit_w, 0.0);
  EXPECT_FALSE(shield.Decide(At(2.5, 150.0, Phase::kTrain, 4, 200.0)).power_limit_w.has_value());
  // 10 s after the decrease it is over: the budget as it is, the usual margin and sustain.
  EXPECT_EQ(*shield.Decide(At(11.0, 201.0, Phase::kRollout, 4, 200.0)).concurrency, 16);
  EXPECT_DOUBLE_EQ(inner.seen_budget_w, 200.0);
  EXPECT_EQ(shield.interventions(), 2);
  // A decrease with the power already under it cuts nothing.
  EXPECT_EQ(*shield.Decide(At(11.5, 150.0, Phase::kRollout, 16, 180.0)).concurrency, 16);
  EXPECT_EQ(shield.interventions(), 2);
}

TEST(Shield, LongScoringWindowsSustainLonger) {
  EXPECT_EQ(ShieldFor(0.5, 0.5).sustain, 2);    // a quarter of one interval: the default holds
  EXPECT_EQ(ShieldFor(30.0, 0.5).sustain, 15);  // 7.5 s
}

TEST(Features, LevelsByHand) {
  const Range c{1, 16};
  const int want_c[] = {1, 1, 2, 3, 4, 6, 8, 11, 16};  // round(2^(i/2))
  for (int i = 0; i < 9; ++i) EXPECT_EQ(ConcurrencyAtLevel(c, i), want_c[i]) << i;
  const Range g{4, 16};
  const int want_g[] = {4, 7, 10, 13, 16};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(GroupAtLevel(g, i), want_g[i]) << i;
  EXPECT_EQ(NearestConcurrencyLevel(c, 16), 8);
  EXPECT_EQ(NearestConcurrencyLevel(c, 5), 5);  // log2 5 = 2.32: nearest 6 (2.58) over 4 (2)
  EXPECT_EQ(NearestConcurrencyLevel(c, 1), 0);  // levels 0 and 1 are both 1: the first
}

TEST(Features, HeadroomHistoryPhaseAndPositions) {
  ActuatorLimits l;
  l.concurrency = {1, 16};
  l.group_size = {4, 16};
  l.nameplate_w = 400.0;
  FeatureState f;
  double x[kFeatureCount];
  f.Compute(At(0.0, 330.0, Phase::kRollout, 4), l, x);
  EXPECT_NEAR(x[0], 0.1, 1e-12);  // 330 / 300 - 1
  EXPECT_NEAR(x[4], 0.1, 1e-12);  // history starts filled with the first value
  EXPECT_NEAR(x[5], 0.0, 1e-12);
  f.Compute(At(0.5, 270.0, Phase::kTrain, 4), l, x);
  EXPECT_NEAR(x[0], -0.1, 1e-12);
  EXPECT_NEAR(x[1], 0.1, 1e-12);
  EXPECT_NEAR(x[5], -0.2, 1e-12);
  EXPECT_EQ(x[kHistory + 1 + static_cast<int>(Phase::kTrain)], 1.0);
  EXPECT_EQ(x[kHistory + 1 + static_cast<int>(Phase::kRollout)], 0.0);
  EXPECT_NEAR(x[kHistory + 1 + kPhaseCount + 1], 0.5, 1e-12);         // log2 4 / log2 16
  EXPECT_NEAR(x[kHistory + 1 + kPhaseCount + 2], 4.0 / 12.0, 1e-12);  // group 8 in [4, 16]
  const int budget = kHistory + 1 + kPhaseCount + 4;
  EXPECT_NEAR(x[budget], 0.75, 1e-12);      // 300 / 400
  EXPECT_EQ(x[budget + 1], 1.0);            // no power limit
  EXPECT_NEAR(x[budget + 2], -0.1, 1e-12);  // the update under way: 270 / 300 - 1
  EXPECT_EQ(x[budget + 3], 0.0);            // concurrency has not moved in rollout
}

TEST(Features, AuthorityFeatures) {
  ActuatorLimits l;
  l.concurrency = {1, 64};
  l.group_size = {4, 16};
  l.nameplate_w = 400.0;
  FeatureState f;
  double x[kFeatureCount];
  const int limit = kHistory + 1 + kPhaseCount + 5;
  // The last update: two train intervals at 360 and 390 W against 300 W; then rollout.
  f.Compute(At(0.0, 360.0, Phase::kTrain, 4), l, x);
  f.Compute(At(0.5, 390.0, Phase::kTrain, 4), l, x);
  EXPECT_NEAR(x[limit + 1], 375.0 / 300.0 - 1.0, 1e-12);
  // Rollout with power = 200 + 25 log2(c) W: the slope on log2 c is 25 / 300 per doubling.
  for (int i = 0; i < 12; ++i) {
    const int c = 1 << (i % 6);
    Inputs in = At(1.0 + 0.5 * i, 200.0 + 25.0 * (i % 6), Phase::kRollout, c);
    in.power_limit_w = 320.0;
    f.Compute(in, l, x);
  }
  EXPECT_NEAR(x[limit], 0.8, 1e-12);                      // 320 / 400
  EXPECT_NEAR(x[limit + 1], 375.0 / 300.0 - 1.0, 1e-12);  // kept after the update ended
  EXPECT_NEAR(x[limit + 2], 25.0 / 300.0, 1e-9);
  f.Reset();
  f.Compute(At(9.0, 300.0, Phase::kRollout, 4), l, x);
  EXPECT_EQ(x[limit + 1], 0.0);
  EXPECT_EQ(x[limit + 2], 0.0);
}

}  // namespace
}  // namespace headroom::control
