// The plan's standby accounting (issue 53): every registered job counted from its registration,
// unreadable members of a rebuilt ledger, overcommitment, duplicates and restarted agents, and
// a fenced job's floor and standby after its lease.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "coord/coord_test_util.h"
#include "coord/layout.h"
#include "coord/plan.h"

namespace headroom::coord {
namespace {

Member Standby(Member m, double standby_w, std::string phase = "idle") {
  m.standby_w = standby_w;
  m.phase = std::move(phase);
  return m;
}

// Every registered job is counted from its registration: at its standby while it holds, at its
// floor while a step may run; admission moves it to its floor once floor - standby is free.
TEST(PlanStandby, EveryRegisteredJobIsCountedAndAdmissionMovesStandbyToFloor) {
  PlanInput in;
  in.members = {{"a", M("a", 300, 800, 1)}};
  in.registered_at = {{"a", 1}};
  PlanOutput p = Plan(Fresh(1000, 100), in, 5);
  AckAll(p, in);
  ASSERT_NEAR(p.ledger.jobs.at("a").held_w, 800, 1e-9);  // raised to its demand
  // b registers held at its step boundary: counted at its standby, 40 W; its floor (300 W)
  // needs 260 W more, not free (900 - 800 - 40 = 60): it waits, and a comes down to make room.
  in.members["b"] = Standby(M("b", 300, 800, 2), 40);
  in.registered_at["b"] = 2;
  p = Plan(p.ledger, in, 5);
  ASSERT_TRUE(p.ledger.standby.contains("b"));
  EXPECT_NEAR(p.ledger.standby.at("b").standby_w, 40, 1e-9);
  EXPECT_NEAR(p.ledger.HeldW(), 800 + 40, 1e-9);
  EXPECT_NEAR(p.ledger.jobs.at("a").grant_w, 600, 1e-9);  // 900 - 40 - the 260 it waits for
  EXPECT_FALSE(p.ledger.jobs.contains("b"));
  EXPECT_NEAR(p.arrivals_w.at("b"), 40, 1e-9);
  EXPECT_NEAR(RaisedW(Fresh(1000, 100), p), 800, 1e-9);  // a's; b's 40 W came with it
  // a acknowledges 600: b's floor - standby (260) is free now (900 - 600 - 40 = 260).
  AckAll(p, in);
  p = Plan(p.ledger, in, 5);
  ASSERT_TRUE(p.ledger.jobs.contains("b"));
  EXPECT_FALSE(p.ledger.standby.contains("b"));
  EXPECT_NEAR(p.ledger.jobs.at("b").held_w, 300, 1e-9);
  EXPECT_GE(InvariantSlackW(p.ledger), 0.0);
  AckAll(p, in);
  p = Plan(p.ledger, in, 5);
  AckAll(p, in);
  p = Plan(p.ledger, in, 5);
  // c registers mid-step: it draws its floor already (300 W), so it is admitted at once --
  // nothing rises -- and the others come down to make room for it (900 - 300 = 600 for a, b).
  in.members["c"] = Standby(M("c", 300, 800, 3), 40, "rollout");
  in.registered_at["c"] = 3;
  const Ledger before = p.ledger;
  p = Plan(before, in, 5);
  ASSERT_TRUE(p.ledger.jobs.contains("c"));
  EXPECT_NEAR(p.ledger.jobs.at("c").held_w, 300, 1e-9);
  EXPECT_NEAR(RaisedW(before, p), 0, 1e-9);
  EXPECT_NEAR(p.ledger.jobs.at("a").grant_w + p.ledger.jobs.at("b").grant_w, 600, 1e-6);
}

// The ledger deleted while a member's value cannot be read: its agent may act on the grant
// stored for its lease, so the rebuilt ledger counts it there until the value can be read.
TEST(PlanStandby, AnUnreadableMemberOfARebuiltLedgerIsCountedAtItsStoredGrant) {
  PlanInput in;
  in.members = {{"a", M("a", 300, 800, 1)}};
  in.registered_at = {{"a", 1}};
  in.unreadable = {{"b", 2}};
  Grant stored;
  stored.job = "b";
  stored.lease = 2;
  stored.seq = 7;
  stored.job_budget_w = 450;
  stored.admitted = true;
  in.grants["b"] = stored;
  PlanOutput p = Plan(Fresh(1000, 100), in, 5);  // a ledger rebuilt: no jobs yet
  ASSERT_TRUE(p.ledger.standby.contains("b"));
  EXPECT_NEAR(p.ledger.standby.at("b").standby_w, 450, 1e-9);
  EXPECT_FALSE(p.ledger.jobs.contains("b"));  // its floor is unknown: not admitted
  // a gets at most what b's stored grant leaves: 900 - 450.
  ASSERT_TRUE(p.ledger.jobs.contains("a"));
  EXPECT_LE(p.ledger.jobs.at("a").grant_w, 450 + 1e-9);
  EXPECT_LE(p.ledger.HeldW(), 900 + 1e-9);
  // A grant stored for another lease (an older incarnation) is not what this one acts on.
  in.grants["b"].lease = 3;
  p = Plan(Fresh(1000, 100), in, 5);
  EXPECT_FALSE(p.ledger.standby.contains("b"));
  // Readable again: counted as any registered job, at least at the grant it may still act on.
  in.grants["b"].lease = 2;
  p = Plan(Fresh(1000, 100), in, 5);
  in.unreadable.clear();
  in.members["b"] = Standby(M("b", 200, 800, 2), 40);
  in.registered_at["b"] = 2;
  p = Plan(p.ledger, in, 5);
  ASSERT_TRUE(p.ledger.standby.contains("b") || p.ledger.jobs.contains("b"));
  if (p.ledger.standby.contains("b")) {
    EXPECT_NEAR(p.ledger.standby.at("b").standby_w, 450, 1e-9);
  }
}

TEST(PlanStandby, WhatCannotFitEvenAtTheFloorsIsOvercommittedAndARefusedJobStaysCounted) {
  PlanInput in;
  in.members = {{"a", M("a", 500, 800, 1)}};
  in.registered_at = {{"a", 1}};
  PlanOutput p = Plan(Fresh(1000, 100), in, 5);
  AckAll(p, in);
  // b starts mid-step: 500 + 500 = 1000 > 900: b does not fit beside a's floor and is refused.
  in.members["b"] = Standby(M("b", 500, 800, 2), 450, "rollout");
  in.registered_at["b"] = 2;
  p = Plan(p.ledger, in, 5);
  ASSERT_TRUE(p.ledger.jobs.contains("a"));
  ASSERT_TRUE(p.ledger.standby.contains("b"));
  EXPECT_NEAR(p.ledger.OvercommittedW(), 500 + 500 - 900, 1e-9);
  bool refused = false;
  for (const Grant& g : p.grants) refused |= g.job == "b" && !g.admitted;
  EXPECT_TRUE(refused);
  EXPECT_NEAR(p.ledger.jobs.at("a").grant_w, 500, 1e-9);  // a at its floor, never below
  // b holds: 450 W still does not fit: 50 W over; then the operator raises the budget.
  in.members["b"] = Standby(M("b", 500, 800, 2), 450);
  p = Plan(p.ledger, in, 5);
  EXPECT_NEAR(p.ledger.OvercommittedW(), 50, 1e-9);
  Ledger l = p.ledger;
  l.target_site_budget_w = 1500;
  p = Plan(l, in, 5);
  EXPECT_NEAR(p.ledger.OvercommittedW(), 0, 1e-9);
  EXPECT_TRUE(p.ledger.jobs.contains("b"));  // admitted once 1,400 W hold both floors
}

TEST(PlanStandby, ADuplicateIsCountedUntilItsLeaseTakesTheNameAndAGoneJobIsForgotten) {
  PlanInput in;
  in.forget_after_s = 60;
  in.members = {{"a", M("a", 300, 400, 1)}};
  in.registered_at = {{"a", 1}};
  in.duplicates = {{"a@9", Standby(M("a", 300, 400, 9), 30)}};
  PlanOutput p = Plan(Fresh(1000, 100), in, 5);
  ASSERT_TRUE(p.ledger.standby.contains("a@9"));
  EXPECT_TRUE(p.ledger.standby.at("a@9").duplicate);
  EXPECT_NEAR(p.ledger.StandbyW(), 30, 1e-9);
  EXPECT_FALSE(p.ledger.jobs.contains("a@9"));
  // The first agent's lease goes; the duplicate's lease takes the name (its key goes with it).
  in.members = {{"a", Standby(M("a", 300, 400, 9), 30)}};
  in.duplicates.clear();
  in.gone_for_s = {{"a@9", 0.0}};
  p = Plan(p.ledger, in, 5);
  EXPECT_FALSE(p.ledger.standby.contains("a@9"));  // at once: its lease is the member's now
  ASSERT_TRUE(p.ledger.jobs.contains("a"));
  EXPECT_EQ(p.ledger.jobs.at("a").lease, 9);
  // A job in standby whose key goes is kept for forget_after_s, then released.
  in.members["c"] = Standby(M("c", 900, 900, 10), 70);
  in.registered_at["c"] = 3;
  p = Plan(p.ledger, in, 5);
  ASSERT_TRUE(p.ledger.standby.contains("c"));
  in.members.erase("c");
  in.gone_for_s = {{"c", 59.0}};
  p = Plan(p.ledger, in, 5);
  EXPECT_TRUE(p.ledger.standby.contains("c"));
  in.gone_for_s = {{"c", 60.0}};
  p = Plan(p.ledger, in, 5);
  EXPECT_FALSE(p.ledger.standby.contains("c"));
}

// Issue 53: an agent restarted on the same machine is a duplicate while its predecessor's lease
// lives; counted at its standby on top of the job's floor, the same GPUs were counted twice (a
// false OVERCOMMITTED near the floors). A duplicate that names the admitted member's holder as
// replaced, with the same gpus, is charged only its standby above the job's floor.
TEST(PlanStandby, ARestartedAgentsDuplicateIsChargedOnlyAboveItsJobsFloor) {
  PlanInput in;
  Member a = M("a", 800, 900, 1);
  a.gpus = 4;
  a.holder = "host=h boot=b pidns=1 pid=10 start=5";
  in.members = {{"a", a}};
  in.registered_at = {{"a", 1}};
  PlanOutput p = Plan(Fresh(1000, 100), in, 5);
  AckAll(p, in);
  const Ledger admitted = p.ledger;
  ASSERT_NEAR(admitted.jobs.at("a").held_w, 900, 1e-9);  // its demand, all of 1000 - 100
  // Its agent restarted: 4 GPUs idle, 332 W, held; the predecessor's holder seen gone.
  Member restarted = Standby(M("a", 800, 900, 9), 332);
  restarted.gpus = 4;
  restarted.holder = "host=h boot=b pidns=1 pid=11 start=9";
  restarted.replaces = a.holder;
  in.duplicates = {{"a@9", restarted}};
  p = Plan(admitted, in, 5);
  ASSERT_TRUE(p.ledger.standby.contains("a@9"));
  EXPECT_NEAR(p.ledger.standby.at("a@9").standby_w, 0, 1e-9);  // max(0, 332 - 800)
  EXPECT_NEAR(p.arrivals_w.at("a@9"), 0, 1e-9);
  EXPECT_NEAR(p.ledger.HeldW(), 900, 1e-9);
  EXPECT_NEAR(p.ledger.OvercommittedW(), 0, 1e-9);  // floors 800 + 0 <= 900
  EXPECT_NEAR(p.ledger.jobs.at("a").grant_w, 900, 1e-9);
  // Mid-step (counted at its floor, 800 W): still nothing above the job's floor.
  in.duplicates["a@9"].phase = "rollout";
  EXPECT_NEAR(Plan(admitted, in, 5).ledger.standby.at("a@9").standby_w, 0, 1e-9);
  in.duplicates["a@9"].phase = "idle";
  // A larger standby than the floor it restarts (another configuration): the part above.
  in.duplicates["a@9"].floor_w = 850;
  in.duplicates["a@9"].standby_w = 840;
  EXPECT_NEAR(Plan(admitted, in, 5).ledger.standby.at("a@9").standby_w, 840 - 800, 1e-9);
  in.duplicates["a@9"] = restarted;
  // Charged in full: without replaces, naming another holder, or with other gpus (another agent
  // under the name: other GPUs). 800 + 332 - 900 = 232 W over.
  for (const auto& change : std::vector<std::function<void(Member&)>>{
           [](Member& d) { d.replaces.clear(); },
           [](Member& d) { d.replaces = "host=h boot=b pidns=1 pid=12 start=7"; },
           [](Member& d) { d.gpus = 8; }}) {
    in.duplicates["a@9"] = restarted;
    change(in.duplicates["a@9"]);
    p = Plan(admitted, in, 5);
    EXPECT_NEAR(p.ledger.standby.at("a@9").standby_w, 332, 1e-9);
    EXPECT_NEAR(p.arrivals_w.at("a@9"), 332, 1e-9);
    EXPECT_NEAR(p.ledger.OvercommittedW(), 232, 1e-9);
  }
  // The job's member gone (its lease revoked): nothing to be the same job as, in full.
  in.duplicates["a@9"] = restarted;
  in.members.clear();
  p = Plan(admitted, in, 5);
  EXPECT_NEAR(p.ledger.standby.at("a@9").standby_w, 332, 1e-9);
}

// Random plans: held never above the budget in force, whatever the members do -- except by a
// newcomer's standby (drawn without asking), and then no plan raises anything.
// Fenced means held (issue 53): a job whose lease is gone runs the step under way on its floor,
// then holds at its standby. Its floor is not forgotten before kForgetSteps of the steps its
// member declared, and once forgotten its standby stays counted until it registers again or
// for forget_after_s more.
TEST(PlanStandby, AFencedJobsFloorOutlivesItsStepAndItsStandbyIsCountedUntilItRegisters) {
  PlanInput in;
  in.forget_after_s = 10;
  Member a = M("a", 300, 1000, 1);
  a.standby_w = 120.0;
  a.has_timeline = true;
  a.timeline.rollout_s = 40.2;  // a step of 40.2 + 19.5 = 59.7 s, remembered as 60 s
  a.timeline.rest_s = 19.5;
  in.members = {{"a", a}, {"b", M("b", 300, 1000, 2)}};
  in.registered_at = {{"a", 1}, {"b", 2}};
  Ledger l = Plan(Fresh(1000, 0), in, 5).ledger;
  ASSERT_TRUE(l.jobs.contains("a"));
  EXPECT_DOUBLE_EQ(l.jobs.at("a").standby_w, 120.0);
  EXPECT_DOUBLE_EQ(l.jobs.at("a").step_s, 60.0);
  // The ledger keeps both across a write (its JSON).
  auto back = LedgerFromJson(ToJson(l), "test");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_DOUBLE_EQ(back->jobs.at("a").standby_w, 120.0);
  EXPECT_DOUBLE_EQ(back->jobs.at("a").step_s, 60.0);
  // Its lease goes: its floor is held for 2 x 60 s, well past forget_after_s.
  in.members.erase("a");
  for (const double gone_s : {0.0, 11.0, 119.0}) {
    in.gone_for_s["a"] = gone_s;
    PlanOutput p = Plan(l, in, 5);
    ASSERT_TRUE(p.ledger.jobs.contains("a")) << gone_s;
    EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").held_w, 300.0) << gone_s;
    EXPECT_TRUE(p.forgotten.empty());
    l = p.ledger;
  }
  in.gone_for_s["a"] = 120.0;
  PlanOutput p = Plan(l, in, 5);
  EXPECT_FALSE(p.ledger.jobs.contains("a"));
  ASSERT_EQ(p.forgotten.size(), 1u);
  // Held, it draws its standby: 120 W stay counted, the 180 W above them are free for b.
  ASSERT_TRUE(p.ledger.standby.contains("a"));
  EXPECT_DOUBLE_EQ(p.ledger.standby.at("a").fenced_gone_s, 120.0);
  EXPECT_DOUBLE_EQ(p.ledger.standby.at("a").standby_w, 120.0);
  EXPECT_NEAR(p.ledger.HeldW(), p.ledger.jobs.at("b").held_w + 120.0, 1e-9);
  EXPECT_GE(InvariantSlackW(p.ledger), 0.0);
  back = LedgerFromJson(ToJson(p.ledger), "test");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_DOUBLE_EQ(back->standby.at("a").fenced_gone_s, 120.0);
  // Counted for forget_after_s (10 s) more: until 130 s gone.
  l = p.ledger;
  in.gone_for_s["a"] = 129.0;
  p = Plan(l, in, 5);
  ASSERT_TRUE(p.ledger.standby.contains("a"));
  {
    PlanInput later = in;
    later.gone_for_s["a"] = 130.0;
    EXPECT_FALSE(Plan(p.ledger, later, 5).ledger.standby.contains("a"));
  }
  l = p.ledger;
  // It registers again, held: a newcomer, counted at its standby, then admitted at its floor.
  in.gone_for_s.erase("a");
  in.members["a"] = a;
  in.members["a"].lease = 7;
  p = Plan(l, in, 5);
  const bool admitted = p.ledger.jobs.contains("a");
  if (!admitted) {
    ASSERT_TRUE(p.ledger.standby.contains("a"));
    EXPECT_LT(p.ledger.standby.at("a").fenced_gone_s, 0.0);
    EXPECT_EQ(p.ledger.standby.at("a").lease, 7);
  }
  for (int k = 0; k < 10 && !p.ledger.jobs.contains("a"); ++k) {
    for (const auto& [name, j] : p.ledger.jobs)
      in.acks[name] = {name, 1, j.seq, j.lease, j.grant_w};
    p = Plan(p.ledger, in, 5);
    EXPECT_GE(InvariantSlackW(p.ledger), 0.0);
  }
  EXPECT_TRUE(p.ledger.jobs.contains("a"));
  EXPECT_FALSE(p.ledger.standby.contains("a"));
}

}  // namespace
}  // namespace headroom::coord
