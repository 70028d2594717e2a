// The plan (coord/plan.h): admission, the split and its order (down before up), gone and
// unreadable members, budget changes, the two job classes and loans; random sequences against
// the invariant. The standby accounting is in plan_standby_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>

#include "coord/coord_test_util.h"
#include "coord/layout.h"
#include "coord/plan.h"

namespace headroom::coord {
namespace {

TEST(Allocate, FloorsThenProportionalToDemandAboveFloorCappedAtDemand) {
  std::map<std::string, AllocationJob> jobs = {{"a", {100, 500}}, {"b", {200, 300}}};
  auto got = Allocate(500, jobs);  // 200 above floors, 500 demanded above: 0.4 of each
  EXPECT_DOUBLE_EQ(got["a"], 100 + 0.4 * 400);
  EXPECT_DOUBLE_EQ(got["b"], 200 + 0.4 * 100);
  got = Allocate(10000, jobs);
  EXPECT_DOUBLE_EQ(got["a"], 500);
  EXPECT_DOUBLE_EQ(got["b"], 300);
}

TEST(Plan, AdmitsAtTheFloorRefusesWhatDoesNotFitAndMovesDownBeforeUp) {
  PlanInput in;
  in.members = {
      {"a", M("a", 100, 500, 1)}, {"b", M("b", 100, 500, 2)}, {"c", M("c", 900, 1000, 3)}};
  in.registered_at = {{"a", 1}, {"b", 2}, {"c", 3}};
  PlanOutput p = Plan(Fresh(1000, 100), in, 5);
  ASSERT_TRUE(p.changed);
  EXPECT_EQ(p.ledger.jobs.size(), 2u);
  // a and b at their floors, then raised into the room at once: 100 + 350 each.
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").grant_w, 450);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("b").held_w, 450);
  EXPECT_GE(InvariantSlackW(p.ledger), 0.0);
  bool refused = false;
  for (const Grant& g : p.grants) {
    if (g.job == "c") {
      refused = true;
      EXPECT_FALSE(g.admitted);
      EXPECT_NE(g.reason.find("floor 900.0 W does not fit"), std::string::npos) << g.reason;
    }
  }
  EXPECT_TRUE(refused);

  // b's demand drops to its floor: b comes down at once, a goes up only after b acknowledges.
  Ledger l = p.ledger;
  for (const Grant& g : p.grants) in.grants[g.job] = g;
  in.members["b"].demand_w = 150;
  p = Plan(l, in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("b").grant_w, 150);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("b").held_w, 450);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").grant_w, 450);  // no room yet
  l = p.ledger;
  in.acks["b"] = {"b", 5, l.jobs.at("b").seq, 2, 150};
  p = Plan(l, in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("b").held_w, 150);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").grant_w, 500);  // capped at its demand
  EXPECT_GE(p.ledger.reassignments, 3u);
}

TEST(Plan, ByValueTheWattsGoWhereTheyMakeTokens) {
  // a: 1 token/s per W from 100 to 300 W then 0.25; b: 0.5 throughout (as AllocateByValue's
  // own test); 600 W less a 0 W reserve: a 300, b 300 -- proportional would give 300 each too,
  // so at 800 W: a's first 200 W, then b's 400 W: a 300, b 500 (proportional: 400 each).
  PlanInput in;
  in.members = {{"a", M("a", 100, 500, 1)}, {"b", M("b", 100, 500, 2)}};
  in.members["a"].value_curve = {{100, 0}, {300, 200}, {500, 250}};
  in.members["b"].value_curve = {{100, 0}, {500, 200}};
  in.registered_at = {{"a", 1}, {"b", 2}};
  in.allocation = Allocation::kValue;
  PlanOutput p = Plan(Fresh(800, 0), in, 5);
  EXPECT_NEAR(p.ledger.jobs.at("a").grant_w, 300, 1e-9);
  EXPECT_NEAR(p.ledger.jobs.at("b").grant_w, 500, 1e-9);
  EXPECT_GE(InvariantSlackW(p.ledger), 0.0);
  // b leaves rollout (demand by phase: its floor): its watts come down at once, and go to a
  // once b has acknowledged.
  Ledger l = p.ledger;
  for (const Grant& g : p.grants) in.grants[g.job] = g;
  in.members["b"].demand_w = 100;
  p = Plan(l, in, 5);
  EXPECT_NEAR(p.ledger.jobs.at("b").grant_w, 100, 1e-9);
  EXPECT_NEAR(p.ledger.jobs.at("a").grant_w, 300, 1e-9);
  l = p.ledger;
  in.acks["b"] = {"b", 5, l.jobs.at("b").seq, 2, 100};
  p = Plan(l, in, 5);
  EXPECT_NEAR(p.ledger.jobs.at("a").grant_w, 500, 1e-9);
  EXPECT_GE(InvariantSlackW(p.ledger), 0.0);
  // A member with no curve: a straight line at its average value.
  in.members["b"].demand_w = 500;
  in.members["b"].value_curve.clear();
  in.members["b"].value_tokens_per_j = 2.0;  // steeper than any of a's
  p = Plan(Fresh(600, 0), in, 5);
  EXPECT_NEAR(p.ledger.jobs.at("b").grant_w, 500, 1e-9);
  EXPECT_NEAR(p.ledger.jobs.at("a").grant_w, 100, 1e-9);
}

// A reserved update (coord/reservation.h) raises its job's floor in the targets: the other
// job's grant comes down first, and the reserved one rises once that is acknowledged; the
// invariant holds at every plan. Raised floors that do not fit are ignored, all of them.
TEST(Plan, AReservedUpdateRaisesItsJobsTargetDownFirst) {
  PlanInput in;
  in.members = {{"a", M("a", 100, 1000, 1)}, {"b", M("b", 100, 1000, 2)}};
  in.registered_at = {{"a", 1}, {"b", 2}};
  PlanOutput p = Plan(Fresh(1000, 0), in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").grant_w, 500);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("b").grant_w, 500);
  Ledger l = p.ledger;
  for (const Grant& g : p.grants) in.grants[g.job] = g;
  // a's update reserved at 700 W: its floor 700, the 200 W left split in proportion to demand
  // above the floors (a: 300, b: 900): a 700 + 200 x 300/1200 = 750, b 100 + 200 x 900/1200 = 250.
  in.reserved_w = {{"a", 700}};
  p = Plan(l, in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("b").grant_w, 250);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("b").held_w, 500);   // until b acknowledges
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").grant_w, 500);  // no room yet
  EXPECT_GE(InvariantSlackW(p.ledger), 0.0);
  l = p.ledger;
  for (const Grant& g : p.grants) in.grants[g.job] = g;
  in.acks["b"] = {"b", 5, l.jobs.at("b").seq, 2, 250};
  p = Plan(l, in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("b").held_w, 250);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").grant_w, 750);
  EXPECT_GE(InvariantSlackW(p.ledger), 0.0);
  // Reservations whose raised floors exceed the budget are ignored: back to 500 / 500.
  l = p.ledger;
  for (const Grant& g : p.grants) in.grants[g.job] = g;
  in.acks["a"] = {"a", 5, l.jobs.at("a").seq, 1, 750};
  in.reserved_w = {{"a", 700}, {"b", 700}};
  p = Plan(l, in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").grant_w, 500);
  EXPECT_GE(InvariantSlackW(p.ledger), 0.0);
}

TEST(Plan, AHoldTravelsWithTheGrantAndAChangedOneRewritesIt) {
  PlanInput in;
  in.members = {{"a", M("a", 100, 500, 1)}};
  in.registered_at = {{"a", 1}};
  PlanOutput p = Plan(Fresh(1000, 0), in, 5);
  Ledger l = p.ledger;
  for (const Grant& g : p.grants) in.grants[g.job] = g;
  EXPECT_FALSE(Plan(l, in, 5).changed);  // nothing new
  in.holds["a"] = {5.0, 3};
  p = Plan(l, in, 5);
  ASSERT_EQ(p.grants.size(), 1u);
  EXPECT_DOUBLE_EQ(p.grants[0].hold_s, 5.0);
  EXPECT_EQ(p.grants[0].hold_step, 3);
  EXPECT_DOUBLE_EQ(p.grants[0].job_budget_w, 500);  // the watts unchanged
  l = p.ledger;
  in.grants["a"] = p.grants[0];
  EXPECT_FALSE(Plan(l, in, 5).changed);  // the same hold: no write
  in.holds.erase("a");
  p = Plan(l, in, 5);
  ASSERT_EQ(p.grants.size(), 1u);
  EXPECT_DOUBLE_EQ(p.grants[0].hold_s, 0.0);
  auto back = GrantFromJson(ToJson(in.grants["a"]), "grant");
  ASSERT_TRUE(back);
  EXPECT_DOUBLE_EQ(back->hold_s, 5.0);
  EXPECT_EQ(back->hold_step, 3);
}

TEST(Plan, AGoneLeaseFallsToTheFloorAndANewIncarnationKeepsThePlace) {
  PlanInput in;
  in.members = {{"a", M("a", 100, 500, 1)}, {"b", M("b", 100, 500, 2)}};
  in.registered_at = {{"a", 1}, {"b", 2}};
  Ledger l = Plan(Fresh(700, 0), in, 5).ledger;
  EXPECT_DOUBLE_EQ(l.jobs.at("a").held_w, 350);
  in.members.erase("a");
  in.gone_for_s["a"] = 0.0;
  PlanOutput p = Plan(l, in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").held_w, 100);
  EXPECT_EQ(p.ledger.jobs.at("a").lease, 0);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("b").grant_w, 500);
  l = p.ledger;
  in.members["a"] = M("a", 100, 500, 9);  // restarted
  in.gone_for_s.erase("a");
  p = Plan(l, in, 5);
  EXPECT_EQ(p.ledger.jobs.at("a").lease, 9);
  // Shares 350/350 again: b down at once, a up into the 100 W b does not hold.
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("b").grant_w, 350);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("b").held_w, 500);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").grant_w, 200);
  // A new incarnation with a larger floor takes the place only once the difference is free.
  {
    PlanInput big = in;
    big.members["a"] = M("a", 400, 500, 10);
    PlanOutput waits = Plan(p.ledger, big, 5);  // b holds 500 of 700: 100 free, 300 needed
    EXPECT_NE(waits.ledger.jobs.at("a").lease, 10);
    EXPECT_GE(InvariantSlackW(waits.ledger), 0.0);
  }
  // forgotten after forget_after_s with no member
  in.members.erase("a");
  in.gone_for_s["a"] = 61;
  p = Plan(p.ledger, in, 5);
  EXPECT_FALSE(p.ledger.jobs.contains("a"));
  ASSERT_EQ(p.forgotten.size(), 1u);
}

// Unknown is not gone: a member key alive on the ledger's lease, its value unreadable, keeps
// its lease and what it holds; never forgotten while the key lives; gone only with its lease.
TEST(Plan, AnUnreadableMemberKeepsWhatItHolds) {
  PlanInput in;
  in.members = {{"a", M("a", 100, 500, 1)}, {"b", M("b", 100, 500, 2)}};
  in.registered_at = {{"a", 1}, {"b", 2}};
  PlanOutput p = Plan(Fresh(700, 0), in, 5);
  for (const Grant& g : p.grants) in.grants[g.job] = g;
  ASSERT_DOUBLE_EQ(p.ledger.jobs.at("b").held_w, 350);
  in.members.erase("b");
  in.unreadable["b"] = 2;
  in.gone_for_s["b"] = 1000;  // a caller's mistake: still not forgotten
  in.members["a"].demand_w = 600;
  p = Plan(p.ledger, in, 5);
  EXPECT_EQ(p.ledger.jobs.at("b").lease, 2);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("b").held_w, 350);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").grant_w, 350);  // no room: b holds its 350
  EXPECT_TRUE(p.forgotten.empty());
  EXPECT_GE(InvariantSlackW(p.ledger), 0.0);
  // Another incarnation's key, unreadable: the old lease is gone (its agent fenced at the
  // floor), the floor stays held, the job is not forgotten.
  in.unreadable["b"] = 3;
  p = Plan(p.ledger, in, 5);
  EXPECT_EQ(p.ledger.jobs.at("b").lease, 0);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("b").held_w, 100);
  EXPECT_TRUE(p.forgotten.empty());
  // The key gone with its lease: forgotten after forget_after_s.
  in.unreadable.clear();
  p = Plan(p.ledger, in, 5);
  EXPECT_FALSE(p.ledger.jobs.contains("b"));
}

// A grant key that differs from the ledger in any field it decides is granted again; one with a
// seq above the ledger's moves the sequence past it.
TEST(Plan, AGrantKeyUnlikeTheLedgerIsGrantedAgainPastTheHighestSeq) {
  PlanInput in;
  in.members = {{"a", M("a", 100, 500, 1)}, {"b", M("b", 100, 500, 2)}};
  in.registered_at = {{"a", 1}, {"b", 2}};
  PlanOutput p = Plan(Fresh(700, 0), in, 5);
  for (const Grant& g : p.grants) in.grants[g.job] = g;
  // As written: nothing to do.
  PlanOutput same = Plan(p.ledger, in, 5);
  EXPECT_FALSE(same.changed);
  // Other watts at the same seq: a's grant again, at the ledger's watts, a new seq.
  in.grants["a"].job_budget_w = 5000;
  PlanOutput again = Plan(p.ledger, in, 5);
  ASSERT_EQ(again.grants.size(), 1u);
  EXPECT_EQ(again.grants[0].job, "a");
  EXPECT_DOUBLE_EQ(again.grants[0].job_budget_w, 350);
  EXPECT_GT(again.grants[0].seq, in.grants["a"].seq);
  // A seq far above the ledger's (b's key): the sequence goes on from it.
  in.grants["a"] = again.grants[0];
  in.grants["b"].seq = 1000000;
  PlanOutput past = Plan(again.ledger, in, 5);
  ASSERT_EQ(past.grants.size(), 1u);
  EXPECT_EQ(past.grants[0].job, "b");
  EXPECT_EQ(past.grants[0].seq, 1000001);
  EXPECT_EQ(past.ledger.seq, 1000001);
  EXPECT_DOUBLE_EQ(past.grants[0].job_budget_w, 350);
  // A missing key: granted again.
  in.grants = {};
  for (const Grant& g : past.grants) in.grants[g.job] = g;
  PlanOutput missing = Plan(past.ledger, in, 5);
  ASSERT_EQ(missing.grants.size(), 1u);
  EXPECT_EQ(missing.grants[0].job, "a");
}

TEST(Plan, ALateComerIsAdmittedOnceTheOthersGaveUpItsFloor) {
  PlanInput in;
  in.members = {{"a", M("a", 100, 1000, 1)}, {"b", M("b", 100, 1000, 2)}};
  in.registered_at = {{"a", 1}, {"b", 2}};
  Ledger l = Plan(Fresh(1000, 0), in, 5).ledger;  // a and b hold all 1000 W
  EXPECT_DOUBLE_EQ(l.HeldW(), 1000);
  in.members["c"] = M("c", 200, 1000, 3);
  in.registered_at["c"] = 3;
  PlanOutput p = Plan(l, in, 5);
  EXPECT_FALSE(p.ledger.jobs.contains("c"));
  // a and b come down to leave c's floor out: (1000 - 200) split 400/400.
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").grant_w, 400);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("b").grant_w, 400);
  l = p.ledger;
  in.acks["a"] = {"a", 5, l.jobs.at("a").seq, 1, 400};
  in.acks["b"] = {"b", 5, l.jobs.at("b").seq, 2, 400};
  p = Plan(l, in, 5);
  ASSERT_TRUE(p.ledger.jobs.contains("c"));
  EXPECT_GE(p.ledger.jobs.at("c").grant_w, 200);
  EXPECT_GE(InvariantSlackW(p.ledger), 0.0);
}

TEST(Plan, ASiteBudgetIncreaseIsGrantedInTheSamePeriod) {
  PlanInput in;
  in.members = {{"a", M("a", 100, 1000, 1)}};
  Ledger l = Plan(Fresh(500, 0), in, 5).ledger;
  l.target_site_budget_w = 800;
  PlanOutput p = Plan(l, in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.site_budget_w, 800);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").grant_w, 800);
}

TEST(Plan, ASiteBudgetDecreaseIsInForceOnceTheHeldWattsFit) {
  PlanInput in;
  in.members = {{"a", M("a", 100, 500, 1)}, {"b", M("b", 100, 500, 2)}};
  Ledger l = Plan(Fresh(1000, 0), in, 5).ledger;
  l.target_site_budget_w = 600;
  PlanOutput p = Plan(l, in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.site_budget_w, 1000);  // not yet: nobody acknowledged
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").grant_w, 300);
  l = p.ledger;
  in.acks["a"] = {"a", 5, l.jobs.at("a").seq, 1, 300};
  in.acks["b"] = {"b", 5, l.jobs.at("b").seq, 2, 300};
  p = Plan(l, in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.site_budget_w, 600);
  EXPECT_GE(InvariantSlackW(p.ledger), 0.0);
}

// A new incarnation declaring a smaller floor than the ledger kept (300 W), with a demand below
// that floor (200 W): the demand is stored as the floor, and the next period, with nothing new,
// changes nothing. Before, the member's 200 W against the stored 300 W read as a change every
// period and the ledger was written every period.
TEST(Plan, ADemandBelowAFloorTheLedgerKeptIsNoChangeEveryPeriod) {
  PlanInput in;
  in.members = {{"a", M("a", 300, 500, 1)}};
  in.registered_at = {{"a", 1}};
  PlanOutput p = Plan(Fresh(1000, 0), in, 5);
  AckAll(p, in);
  in.members["a"] = M("a", 100, 200, 9);  // restarted with a smaller configuration
  p = Plan(p.ledger, in, 5);
  EXPECT_EQ(p.ledger.jobs.at("a").lease, 9);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").floor_w, 300);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").demand_w, 300);
  AckAll(p, in);
  const PlanOutput again = Plan(p.ledger, in, 5);
  EXPECT_FALSE(again.changed);
  EXPECT_TRUE(again.grants.empty());
}

TEST(PlanClasses, OpportunisticJobsGetOnlyWhatTheGuaranteedOnesLeave) {
  PlanInput in;
  // Budget 1000 - reserve 100 = 900: a and b want 300 each, w1 and w2 (opportunistic) 400 each.
  in.members = {{"a", M("a", 100, 300, 1)},
                {"b", M("b", 100, 300, 2)},
                {"w1", Opportunistic("w1", 400, 3)},
                {"w2", Opportunistic("w2", 400, 4)}};
  in.registered_at = {{"w1", 1}, {"w2", 2}, {"a", 3}, {"b", 4}};  // the workers came first
  PlanOutput p = Plan(Fresh(1000, 100), in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").grant_w, 300);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("b").grant_w, 300);
  // The 300 W left, split in proportion to demand: 150 each.
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("w1").grant_w, 150);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("w2").grant_w, 150);
  EXPECT_EQ(p.ledger.jobs.at("w1").job_class, JobClass::kOpportunistic);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("w1").floor_w, 0);
  EXPECT_GE(InvariantSlackW(p.ledger), 0.0);
  // The ledger and the member keep the class through their JSON.
  auto back = LedgerFromJson(ToJson(p.ledger), "ledger");
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->jobs.at("w2").job_class, JobClass::kOpportunistic);
  EXPECT_EQ(back->jobs.at("a").job_class, JobClass::kGuaranteed);
  auto m = MemberFromJson(ToJson(in.members.at("w1")), "m");
  ASSERT_TRUE(m) << m.error().message();
  EXPECT_EQ(m->job_class, JobClass::kOpportunistic);
}

TEST(PlanClasses, GuaranteedDemandRisingShrinksTheOpportunisticFirstDownBeforeUp) {
  PlanInput in;
  in.members = {{"a", M("a", 100, 300, 1)}, {"w", Opportunistic("w", 1000, 2)}};
  PlanOutput p = Plan(Fresh(1000, 0), in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("w").grant_w, 700);
  AckAll(p, in);
  Ledger l = p.ledger;
  // a wants 900: w's grant falls to 100 in this period; a rises only into the room there is
  // (none: w still holds 700 until it acknowledges).
  in.members["a"].demand_w = 900;
  p = Plan(l, in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("w").grant_w, 100);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("w").held_w, 700);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").grant_w, 300);
  EXPECT_GE(InvariantSlackW(p.ledger), 0.0);
  AckAll(p, in);
  l = p.ledger;
  p = Plan(l, in, 5);  // w acknowledged 100: a gets its 900 in the next period
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("w").held_w, 100);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").grant_w, 900);
  AckAll(p, in);
  l = p.ledger;
  // a wants everything: w is paused (grant 0), a gets 1000 once w acknowledges.
  in.members["a"].demand_w = 1000;
  p = Plan(l, in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("w").grant_w, 0);
  AckAll(p, in);
  p = Plan(p.ledger, in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").grant_w, 1000);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("w").held_w, 0);
}

TEST(PlanClasses, RoomGoesToTheGuaranteedWantsFirst) {
  PlanInput in;
  in.members = {{"a", M("a", 100, 600, 1)}, {"w", Opportunistic("w", 600, 2)}};
  // The site budget rises from 200 to 1000: a's 500 more come before w's 600.
  Ledger l = Plan(Fresh(200, 0), in, 5).ledger;
  EXPECT_DOUBLE_EQ(l.jobs.at("a").grant_w, 200);
  EXPECT_DOUBLE_EQ(l.jobs.at("w").grant_w, 0);
  l.target_site_budget_w = 1000;
  PlanOutput p = Plan(l, in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").grant_w, 600);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("w").grant_w, 400);
}

TEST(PlanClasses, AGuaranteedNewcomerWaitsForTheOpportunisticToComeDown) {
  PlanInput in;
  in.members = {{"w", Opportunistic("w", 1000, 1)}};
  in.registered_at = {{"w", 1}};
  PlanOutput p = Plan(Fresh(1000, 0), in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("w").held_w, 1000);
  AckAll(p, in);
  in.members["a"] = M("a", 400, 800, 2);
  in.registered_at["a"] = 2;
  p = Plan(p.ledger, in, 5);
  EXPECT_FALSE(p.ledger.jobs.contains("a"));             // waits: 400 W are not free
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("w").grant_w, 600);  // w leaves a's floor out at once
  AckAll(p, in);
  p = Plan(p.ledger, in, 5);
  ASSERT_TRUE(p.ledger.jobs.contains("a"));
  AckAll(p, in);
  p = Plan(p.ledger, in, 5);
  AckAll(p, in);
  p = Plan(p.ledger, in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").grant_w, 800);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("w").grant_w, 200);
  EXPECT_GE(InvariantSlackW(p.ledger), 0.0);
}

TEST(PlanClasses, AnOpportunisticMemberWithAFloorOrAnUnknownClassIsRefused) {
  Member m = Opportunistic("w", 500, 1);
  m.floor_w = 50;
  auto r = MemberFromJson(ToJson(m), "members/w");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("members/w: field 'floor_w': expected 0 for an opportunistic"),
            std::string::npos)
      << r.error().message();
  std::string text = ToJson(M("a", 100, 500, 1));
  const auto at = text.find("\"guaranteed\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 12, "\"sometimes\"");
  r = MemberFromJson(text, "members/a");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("field 'class'"), std::string::npos) << r.error().message();
}

// Loans (PlanInput::loan_lead_s): a guaranteed job publishing its power and step timeline
// lends what it is expected not to draw; its own grant never moves for them.
Member Drawing(Member m, double power_w, bool in_rollout, double phase_elapsed_s) {
  m.power_w = power_w;
  m.has_timeline = true;
  m.timeline.in_rollout = in_rollout;
  m.timeline.phase_elapsed_s = phase_elapsed_s;
  m.timeline.rollout_s = 20;
  m.timeline.rest_s = 100;
  m.timeline.rollout_w = 900;
  m.timeline.rest_w = 400;
  m.timeline.held_w = 100;
  return m;
}

TEST(PlanLoans, WhatAGuaranteedJobIsExpectedNotToDrawIsLentAndComesBackBeforeItRises) {
  PlanInput in;
  in.loan_lead_s = 3.0;  // margin 5 %, cover 0.5: the defaults
  in.members = {{"a", M("a", 100, 1000, 1)}, {"w", Opportunistic("w", 500, 2)}};
  in.registered_at = {{"a", 1}, {"w", 2}};
  // No power published yet: nothing to lend; a holds the whole budget.
  PlanOutput p = Plan(Fresh(1000, 0), in, 5);
  AckAll(p, in);
  p = Plan(p.ledger, in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").grant_w, 1000);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("w").grant_w, 0);
  AckAll(p, in);
  // a draws 400 W early in its rest (100 s long): expected 400 x 1.05 = 420 over the next 3 s;
  // lent: 1000 - 420 - 0.5 x (1000 - 420) = 290.
  in.members["a"] = Drawing(in.members["a"], 400, false, 0);
  p = Plan(p.ledger, in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").grant_w, 1000);
  EXPECT_NEAR(p.ledger.jobs.at("w").grant_w, 290, 1e-9);
  EXPECT_NEAR(p.ledger.jobs.at("w").held_w, 290, 1e-9);
  EXPECT_GE(InvariantSlackW(p.ledger), 0.0);  // the guaranteed jobs' held: 1000 <= 1000
  AckAll(p, in);
  // Its rollout starts in 1.5 s (inside the lead): predicted 400, then 650, then 900 per second;
  // expected 900 x 1.05 = 945; lent 1000 - 945 - 0.5 x 55 = 27.5, lowered at once (held until
  // acknowledged); a's grant unchanged.
  in.members["a"] = Drawing(in.members["a"], 400, false, 98.5);
  p = Plan(p.ledger, in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").grant_w, 1000);
  EXPECT_NEAR(p.ledger.jobs.at("w").grant_w, 27.5, 1e-9);
  EXPECT_NEAR(p.ledger.jobs.at("w").held_w, 290, 1e-9);
  AckAll(p, in);
  p = Plan(p.ledger, in, 5);
  EXPECT_NEAR(p.ledger.jobs.at("w").held_w, 27.5, 1e-9);
  AckAll(p, in);
  // In rollout at 950 W: a rollout's power only falls: 997.5 expected, 1.25 lent.
  in.members["a"] = Drawing(in.members["a"], 950, true, 5);
  p = Plan(p.ledger, in, 5);
  EXPECT_NEAR(p.ledger.jobs.at("w").grant_w, 1.25, 1e-9);
  // Loans off (lead 0): only what the grants leave, nothing.
  AckAll(p, in);
  in.loan_lead_s = 0.0;
  in.members["a"] = Drawing(in.members["a"], 400, false, 0);
  p = Plan(p.ledger, in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("w").grant_w, 0);
}

TEST(PlanLoans, NoLoansWhileTheSiteIsNotSteadyADecreaseTakesThemBackFirst) {
  PlanInput in;
  in.loan_lead_s = 3.0;
  in.members = {{"a", Drawing(M("a", 100, 1000, 1), 400, false, 0)},
                {"w", Opportunistic("w", 500, 2)}};
  in.registered_at = {{"a", 1}, {"w", 2}};
  PlanOutput p = Plan(Fresh(1000, 0), in, 5);
  for (int i = 0; i < 3; ++i) {
    AckAll(p, in);
    p = Plan(p.ledger, in, 5);
  }
  ASSERT_NEAR(p.ledger.jobs.at("w").held_w, 290, 1e-9);
  AckAll(p, in);
  // The site budget asked down to 800: no loans until it is in force; w to what the grants
  // leave (nothing), a to 800.
  Ledger l = p.ledger;
  l.target_site_budget_w = 800;
  p = Plan(l, in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("w").grant_w, 0);
  EXPECT_DOUBLE_EQ(p.ledger.jobs.at("a").grant_w, 800);
  EXPECT_DOUBLE_EQ(p.ledger.site_budget_w, 1000);  // not yet: 1000 + 290 held
  AckAll(p, in);
  p = Plan(p.ledger, in, 5);
  EXPECT_DOUBLE_EQ(p.ledger.site_budget_w, 800);  // in force once everything held fits
  EXPECT_DOUBLE_EQ(p.ledger.HeldW(), 800);
  AckAll(p, in);
  // Steady again: a lends from its 800: 800 - 420 - 0.5 x 380 = 190.
  p = Plan(p.ledger, in, 5);
  EXPECT_NEAR(p.ledger.jobs.at("w").grant_w, 190, 1e-9);
  EXPECT_DOUBLE_EQ(p.ledger.HeldW(JobClass::kGuaranteed), 800);
}

TEST(Plan, RandomSequencesKeepTheInvariant) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 50; ++trial) {
    Ledger l = Fresh(2000, 100);
    PlanInput in;
    in.loan_lead_s = trial % 2 == 1 ? 3.0 : 0.0;  // every other trial with loans
    std::map<std::string, Grant> latest;
    LeaseId next_lease = 1;
    for (int step = 0; step < 200; ++step) {
      std::uniform_int_distribution<int> pick(0, 7);
      const std::string job = "j" + std::to_string(pick(rng));
      switch (std::uniform_int_distribution<int>(0, 5)(rng)) {
        case 0:
          if (!in.members.contains(job)) {
            // Every third job opportunistic (floor 0).
            in.members[job] = pick(rng) % 3 == 0 ? Opportunistic(job, 800, next_lease++)
                                                 : M(job, 100 + 50 * pick(rng), 800, next_lease++);
            // Some draw their standby, some are mid-step (counted at their floor).
            in.members[job].standby_w = 10.0 * pick(rng);
            if (pick(rng) % 4 == 0) in.members[job].phase = "rollout";
            in.registered_at[job] = step;
            in.gone_for_s.erase(job);
          }
          break;
        case 1:
          in.members.erase(job);
          in.gone_for_s[job] = 70.0 * (pick(rng) % 2);
          break;
        case 2:
          if (in.members.contains(job)) in.members[job].demand_w = 200 + 100 * pick(rng);
          // A guaranteed job's power and step (what loans are lent from).
          if (in.members.contains(job) && in.members[job].job_class == JobClass::kGuaranteed) {
            in.members[job] =
                Drawing(in.members[job], 50.0 * pick(rng), pick(rng) % 2 == 0, 15.0 * pick(rng));
          }
          break;
        case 3:
          l.target_site_budget_w = std::max(l.FloorsW() + l.reserve_w, 1000.0 + 200 * pick(rng));
          break;
        default:
          // members acknowledge their latest grants
          for (auto& [name, g] : latest) {
            if (in.members.contains(name) && in.members[name].lease == g.lease) {
              in.acks[name] = {name, g.term, g.seq, g.lease, g.job_budget_w};
            }
          }
      }
      PlanOutput p = Plan(l, in, 1);
      double standby_rise_w = 0.0;
      for (const auto& [name, w] : p.arrivals_w) {
        if (!p.ledger.standby.contains(name)) standby_rise_w += w;  // admitted at once
      }
      for (const auto& [name, s] : p.ledger.standby) {
        const auto before = l.standby.find(name);
        standby_rise_w += std::max(
            0.0, s.standby_w - (before == l.standby.end() ? 0.0 : before->second.standby_w));
      }
      if (InvariantSlackW(l) >= 0.0 && standby_rise_w == 0.0) {
        ASSERT_GE(InvariantSlackW(p.ledger), 0.0) << "trial " << trial << " step " << step;
      } else if (InvariantSlackW(p.ledger) < 0.0) {
        ASSERT_LE(RaisedW(l, p), 0.0) << "trial " << trial << " step " << step;
      }
      for (const auto& [name, j] : p.ledger.jobs) {
        ASSERT_GE(j.held_w + 1e-9, j.grant_w);
        ASSERT_GE(j.grant_w + 1e-9, j.floor_w);
      }
      for (const Grant& g : p.grants) latest[g.job] = g;
      in.grants = latest;
      l = p.ledger;
    }
  }
}

}  // namespace
}  // namespace headroom::coord
