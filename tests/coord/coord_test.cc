// The coordinator's pieces over the in-memory store: the store's semantics, the plan, and the
// protocol end to end with an auditor that sees only what each member acts on (never the
// coordinator's bookkeeping), under injected faults.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "coord/coordinator.h"
#include "coord/counting_store.h"
#include "coord/layout.h"
#include "coord/lease_keeper.h"
#include "coord/member.h"
#include "coord/member_session.h"
#include "coord/memory_store.h"
#include "coord/plan.h"
#include "coord_server/coordinator_server.h"
#include "slurm/batch_scheduler.h"
#include "slurm/suspender.h"

namespace headroom::coord {
namespace {

struct FakeClock {
  double t = 0.0;
  std::function<double()> fn() {
    return [this] { return t; };
  }
};

// ---- MemoryStore ----

TEST(MemoryStore, RevisionsVersionsAndPrefixes) {
  FakeClock clock;
  MemoryStore s(clock.fn());
  EXPECT_EQ(s.revision(), 1);
  ASSERT_EQ(*s.Put("/a/1", "x", 0), 2);
  ASSERT_EQ(*s.Put("/a/2", "y", 0), 3);
  ASSERT_EQ(*s.Put("/a/1", "z", 0), 4);
  ASSERT_EQ(*s.Put("/b", "w", 0), 5);
  auto r = s.Get("/a/", true);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->kvs.size(), 2u);
  EXPECT_EQ(r->kvs[0].key, "/a/1");
  EXPECT_EQ(r->kvs[0].value, "z");
  EXPECT_EQ(r->kvs[0].create_revision, 2);
  EXPECT_EQ(r->kvs[0].mod_revision, 4);
  EXPECT_EQ(r->kvs[0].version, 2);
  EXPECT_EQ(r->revision, 5);
  ASSERT_EQ(*s.Delete("/a/", true), 6);
  EXPECT_TRUE(s.Get("/a/", true)->kvs.empty());
  EXPECT_EQ(*s.Delete("/nothing", false), 6);  // nothing deleted: no new revision
  EXPECT_EQ(PrefixEnd("/a/"), "/a0");
  EXPECT_EQ(PrefixEnd(std::string("a\xff", 2)), "b");
}

TEST(CountingStore, ForwardsEveryCallAndCountsIt) {
  FakeClock clock;
  MemoryStore inner(clock.fn());
  CountingStore s(inner);
  ASSERT_TRUE(s.Put("/a", "1"));
  auto g = s.Get("/a");
  ASSERT_TRUE(g);
  ASSERT_EQ(g->kvs.size(), 1u);
  EXPECT_EQ(g->kvs[0].value, "1");
  auto lease = s.LeaseGrant(3);
  ASSERT_TRUE(lease);
  EXPECT_TRUE(s.LeaseKeepAlive(*lease));
  EXPECT_TRUE(s.LeaseRevoke(*lease));
  EXPECT_FALSE(s.LeaseKeepAlive(*lease));  // failed calls count too
  EXPECT_TRUE(s.Delete("/a"));
  EXPECT_EQ(s.requests(), 7u);
  EXPECT_TRUE(inner.Get("/a", false)->kvs.empty());  // it went through
  EXPECT_EQ(s.Describe(), inner.Describe());
}

TEST(MemoryStore, TransactionsAreAtomicAndConditional) {
  FakeClock clock;
  MemoryStore s(clock.fn());
  TxnRequest create;
  create.compare.push_back(Compare::CreateRevision("/k", Compare::Result::kEqual, 0));
  create.success = {Op::Put("/k", "1"), Op::Put("/j", "2")};
  create.failure = {Op::Get("/k")};
  auto r = s.Txn(create);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->succeeded);
  EXPECT_EQ(r->revision, 2);  // both puts share one revision
  EXPECT_EQ(s.Get("/j", false)->kvs[0].mod_revision, 2);
  r = s.Txn(create);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->succeeded);
  ASSERT_EQ(r->responses.size(), 1u);
  ASSERT_EQ(r->responses[0].size(), 1u);
  EXPECT_EQ(r->responses[0][0].value, "1");
  EXPECT_EQ(s.revision(), 2);
  TxnRequest cas;
  cas.compare.push_back(Compare::ModRevision("/k", Compare::Result::kEqual, 2));
  cas.compare.push_back(Compare::Value("/j", Compare::Result::kEqual, "2"));
  cas.success = {Op::Put("/k", "3")};
  EXPECT_TRUE(s.Txn(cas)->succeeded);
  EXPECT_FALSE(s.Txn(cas)->succeeded);  // mod_revision moved on
  TxnRequest missing;
  missing.compare.push_back(Compare::Value("/none", Compare::Result::kNotEqual, "x"));
  EXPECT_FALSE(s.Txn(missing)->succeeded);  // a missing key fails every value comparison
}

TEST(MemoryStore, LeasesExpireOnTheInjectedClock) {
  FakeClock clock;
  MemoryStore s(clock.fn());
  const LeaseId lease = *s.LeaseGrant(3);
  ASSERT_TRUE(s.Put("/m", "v", lease));
  ASSERT_TRUE(s.Put("/m2", "v", lease));
  clock.t = 2.9;
  EXPECT_EQ(*s.LeaseKeepAlive(lease), 3);
  clock.t = 5.8;
  EXPECT_EQ(s.Get("/m", false)->kvs.size(), 1u);
  const int64_t before = s.revision();
  clock.t = 5.9;
  EXPECT_TRUE(s.Get("/m", false)->kvs.empty());
  EXPECT_EQ(s.revision(), before + 1);  // one revision for the lease's keys
  auto gone = s.LeaseKeepAlive(lease);
  ASSERT_FALSE(gone);
  EXPECT_TRUE(IsLeaseGone(gone.error()));
  EXPECT_EQ(gone.error().kind(), ErrorKind::kNotFound);
  const auto put = s.Put("/m", "v", lease);
  ASSERT_FALSE(put);
  EXPECT_EQ(put.error().kind(), ErrorKind::kNotFound);
  // Errors are told apart by their kind, never by their words (issue 38).
  EXPECT_FALSE(IsLeaseGone(Error::Io("a message that says lease not found")));
  EXPECT_FALSE(IsOutcomeUnknown(Error::Io("a message that says outcome unknown")));
  EXPECT_TRUE(IsOutcomeUnknown(Error::OutcomeUnknown("no words needed")));
  const LeaseId other = *s.LeaseGrant(3);
  ASSERT_TRUE(s.Put("/n", "v", other));
  ASSERT_TRUE(s.LeaseRevoke(other));
  EXPECT_TRUE(s.Get("/n", false)->kvs.empty());
}

TEST(MemoryStore, WatchSeesChangesAfterARevision) {
  FakeClock clock;
  MemoryStore s(clock.fn(), /*history_keep=*/4);
  ASSERT_TRUE(s.Put("/w/a", "1", 0));    // rev 2
  ASSERT_TRUE(s.Put("/x", "1", 0));      // rev 3
  ASSERT_TRUE(s.Delete("/w/a", false));  // rev 4
  auto w = s.Watch("/w/", true, 1, 0.0);
  ASSERT_TRUE(w);
  ASSERT_EQ(w->events.size(), 2u);
  EXPECT_EQ(w->events[0].type, WatchEvent::Type::kPut);
  EXPECT_EQ(w->events[1].type, WatchEvent::Type::kDelete);
  EXPECT_EQ(w->events[1].kv.mod_revision, 4);
  EXPECT_TRUE(s.Watch("/w/", true, 4, 0.0)->events.empty());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(s.Put("/y", "v", 0));
  EXPECT_TRUE(s.Watch("/w/", true, 1, 0.0)->compacted);
}

TEST(MemoryStore, CompactionDropsTheHistoryNotTheKeys) {
  FakeClock clock;
  MemoryStore s(clock.fn());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(s.Put("/k", std::to_string(i), 0));  // revs 2..6
  ASSERT_TRUE(s.Compact(4));
  EXPECT_TRUE(s.Watch("/k", false, 3, 0.0)->compacted);
  auto w = s.Watch("/k", false, 4, 0.0);
  ASSERT_FALSE(w->compacted);
  EXPECT_EQ(w->events.size(), 2u);
  EXPECT_EQ(s.Get("/k", false)->kvs[0].value, "4");
  EXPECT_FALSE(s.Compact(100));
}

TEST(Protocol, TheLeaderCompactsOldHistory) {
  FakeClock clock;
  MemoryStore store(clock.fn());
  CoordinatorConfig cc;
  cc.site = "s";
  cc.site_budget_w = 1000;
  cc.id = "c";
  cc.keep_history_s = 10;
  Coordinator c(store, cc, clock.fn(), [](auto&) {});
  for (int i = 0; i < 30; ++i) {
    clock.t += 1.0;
    c.Step();
  }
  EXPECT_GT(c.status().compacted_to, 0);
  EXPECT_TRUE(store.Watch("/", true, 1, 0.0)->compacted);
}

TEST(MemoryStore, FaultsUnavailableAndUnknownOutcome) {
  FakeClock clock;
  MemoryStore s(clock.fn());
  s.SetUnavailable(true);
  EXPECT_FALSE(s.Get("/a", false));
  s.SetUnavailable(false);
  s.FailNextWriteAfterApply();
  auto r = s.Put("/a", "1", 0);
  ASSERT_FALSE(r);
  EXPECT_TRUE(IsOutcomeUnknown(r.error()));
  EXPECT_EQ(s.Get("/a", false)->kvs.size(), 1u);  // applied all the same
}

// ---- Layout ----

TEST(Layout, ValuesRoundTripAndBadOnesAreRefusedWithTheField) {
  Ledger l;
  l.term = 7;
  l.site_budget_w = 1000;
  l.target_site_budget_w = 900;
  l.reserve_w = 50;
  l.seq = 3;
  l.jobs["a"] = {100, 400, 300, 350, 3, 0x1234};
  auto back = LedgerFromJson(ToJson(l), "ledger");
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->jobs.at("a").held_w, 350);
  EXPECT_EQ(back->jobs.at("a").lease, 0x1234);
  EXPECT_EQ(back->target_site_budget_w, 900);
  auto bad = LedgerFromJson(R"({"term":1})", "/headroom/s/ledger");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message(), "/headroom/s/ledger: field 'request_id': missing");
  auto neg = GrantFromJson(
      R"({"job":"a","term":1,"seq":1,"lease":1,"job_budget_w":-5,"admitted":true,"reason":""})",
      "g");
  ASSERT_FALSE(neg);
  EXPECT_EQ(neg.error().message(), "g: field 'job_budget_w': expected watts >= 0");
  EXPECT_FALSE(MemberFromJson("not json", "m"));
  // A member's update watts (reservations before the update): optional, watts >= 0.
  Member m;
  m.job = "a";
  m.gpus = 2;
  m.floor_w = 200;
  m.demand_w = 800;
  m.update_w = 760;
  auto mb = MemberFromJson(ToJson(m), "m");
  ASSERT_TRUE(mb) << mb.error().message();
  EXPECT_EQ(mb->update_w, 760);
  m.update_w = 0;
  EXPECT_EQ(ToJson(m).find("update_w"), std::string::npos);  // absent: 0
  std::string text = ToJson(m);
  text.insert(text.size() - 1, R"(,"update_w":-1)");
  auto neg_update = MemberFromJson(text, "m");
  ASSERT_FALSE(neg_update);
  EXPECT_EQ(neg_update.error().message(), "m: field 'update_w': expected watts >= 0");
  EXPECT_FALSE(CheckName("a/b", "job"));
  EXPECT_TRUE(CheckName("job-1.x_y", "job"));
}

TEST(Layout, ValuesCarryTheirVersionAndANewerOneIsRefused) {
  Grant g;
  g.job = "a";
  g.term = 1;
  g.seq = 2;
  const std::string text = ToJson(g);
  EXPECT_NE(text.find(R"("v":1)"), std::string::npos) << text;
  // The version before (no "v") reads; a newer one does not, saying so.
  EXPECT_TRUE(GrantFromJson(
      R"({"job":"a","term":1,"seq":1,"lease":1,"job_budget_w":5,"admitted":true,"reason":""})",
      "g"));
  auto newer = GrantFromJson(
      R"({"v":2,"job":"a","term":1,"seq":1,"lease":1,"job_budget_w":5,"admitted":true,)"
      R"("reason":""})",
      "/headroom/s/grants/a");
  ASSERT_FALSE(newer);
  EXPECT_EQ(newer.error().message(),
            "/headroom/s/grants/a: field 'v': version 2 is newer than this reader's (1): "
            "written by a newer headroom");
  EXPECT_FALSE(MemberFromJson(R"({"v":"1"})", "m"));
  for (const std::string& t : {ToJson(Member{}), ToJson(Ack{}), ToJson(Ledger{})}) {
    EXPECT_NE(t.find(R"("v":1)"), std::string::npos) << t;
  }
}

TEST(Layout, TheTargetAndTheLedgersPendingReserveRoundTrip) {
  Target t{1200, 100, "c0:target:1"};
  auto back = TargetFromJson(ToJson(t), "target");
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->site_budget_w, 1200);
  EXPECT_EQ(back->reserve_w, 100);
  EXPECT_EQ(back->request_id, "c0:target:1");
  auto bad = TargetFromJson(R"({"site_budget_w":100,"reserve_w":100,"request_id":""})", "t");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message(), "t: field 'reserve_w': expected below site_budget_w");
  Ledger l;
  l.reserve_w = 50;
  auto plain = LedgerFromJson(ToJson(l), "ledger");
  ASSERT_TRUE(plain);
  EXPECT_LT(plain->target_reserve_w, 0.0);  // none pending
  EXPECT_EQ(plain->TargetReserveW(), 50);
  l.target_reserve_w = 200;
  l.target_revision = 9;
  auto pending = LedgerFromJson(ToJson(l), "ledger");
  ASSERT_TRUE(pending);
  EXPECT_EQ(pending->TargetReserveW(), 200);
  EXPECT_EQ(pending->target_revision, 9);
}

// ---- Plan ----

TEST(Allocate, FloorsThenProportionalToDemandAboveFloorCappedAtDemand) {
  std::map<std::string, AllocationJob> jobs = {{"a", {100, 500}}, {"b", {200, 300}}};
  auto got = Allocate(500, jobs);  // 200 above floors, 500 demanded above: 0.4 of each
  EXPECT_DOUBLE_EQ(got["a"], 100 + 0.4 * 400);
  EXPECT_DOUBLE_EQ(got["b"], 200 + 0.4 * 100);
  got = Allocate(10000, jobs);
  EXPECT_DOUBLE_EQ(got["a"], 500);
  EXPECT_DOUBLE_EQ(got["b"], 300);
}

Member M(const std::string& job, double floor_w, double demand_w, LeaseId lease) {
  Member m;
  m.job = job;
  m.gpus = 1;
  m.floor_w = floor_w;
  m.demand_w = demand_w;
  m.nameplate_w = demand_w;
  m.lease = lease;
  // Held at its step boundary with no standby draw: counted at 0 W until admitted (the
  // protocol before standby; tests of standby set their own).
  m.phase = "idle";
  m.standby_w = 0.0;
  return m;
}

Ledger Fresh(double site_w, double reserve_w) {
  Ledger l;
  l.site_budget_w = site_w;
  l.target_site_budget_w = site_w;
  l.reserve_w = reserve_w;
  return l;
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

TEST(Member, DemandByPhaseAndAValueCurveFromItsOwnHistory) {
  FakeClock clock;
  MemoryStore store(clock.fn());
  MemberConfig mc;
  mc.site = "s";
  mc.job = "j";
  mc.nameplate_w = 800;
  mc.floor_w = 200;
  mc.phase_demand = true;
  SiteMember member(store, mc, clock.fn(), [](auto&) {});
  const auto published = [&] {
    auto r = store.Get("/headroom/s/members/j", false);
    EXPECT_TRUE(r && r->kvs.size() == 1);
    return *MemberFromJson(r->kvs[0].value, "member");
  };
  member.Observe(0, 300, "train", 0);
  member.Step();
  EXPECT_DOUBLE_EQ(published().demand_w, 200);  // outside rollout: the floor
  EXPECT_TRUE(published().value_curve.empty());
  // Rollout decisions at 16 powers from 300 to 750 W, tokens/s = power / 10: published at once
  // (the phase changed), then with a curve once there are 8 of them.
  clock.t = 0.1;
  member.Observe(0.1, 300, "rollout", 30);
  member.Step();
  EXPECT_DOUBLE_EQ(published().demand_w, 800);
  for (int i = 1; i < 16; ++i)
    member.Observe(0.1 + i, 300 + 30 * i, "rollout", (300 + 30 * i) / 10.0);
  const auto curve = member.HistoryCurve();
  ASSERT_EQ(curve.size(), 8u);  // two decisions per bin
  for (const ValuePoint& p : curve) EXPECT_NEAR(p.tokens_per_s, p.budget_w / 10.0, 1e-9);
  EXPECT_NEAR(curve.front().budget_w, 315, 1e-9);
  EXPECT_NEAR(curve.back().budget_w, 735, 1e-9);
  clock.t = 2.0;
  member.Step();
  EXPECT_EQ(published().value_curve.size(), 8u);
  // A curve given (the twin's) is published as it is.
  MemberConfig given = mc;
  given.job = "k";
  given.value_curve = {{200, 1}, {800, 9}};
  SiteMember k(store, given, clock.fn(), [](auto&) {});
  k.Step();
  auto r = store.Get("/headroom/s/members/k", false);
  ASSERT_TRUE(r && r->kvs.size() == 1);
  EXPECT_EQ(MemberFromJson(r->kvs[0].value, "member")->value_curve.size(), 2u);
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

TEST(Member, TheStepTimelineFromThePhasesAndAHoldPassedOnOnce) {
  FakeClock clock;
  MemoryStore store(clock.fn());
  MemberConfig mc;
  mc.site = "s";
  mc.job = "j";
  mc.nameplate_w = 1200;
  mc.floor_w = 150;
  mc.lease_ttl_s = 10;
  SiteMember member(store, mc, clock.fn(), [](auto&) {});
  member.Step();
  EXPECT_FALSE(member.Timeline());
  // Rollout 0-10 s at 1000 W, the rest 10-20 s at 200 W, rollout again from 20 s.
  for (double t = 0; t < 20; t += 0.5) {
    member.Observe(t, t < 10 ? 1000 : 200, t < 10 ? "rollout" : "train", 10);
  }
  member.Observe(20, 1000, "rollout", 10);
  auto tl = member.Timeline();
  ASSERT_TRUE(tl);
  EXPECT_EQ(tl->step, 2);
  EXPECT_TRUE(tl->in_rollout);
  EXPECT_DOUBLE_EQ(tl->phase_elapsed_s, 0);
  EXPECT_DOUBLE_EQ(tl->rollout_s, 10);
  EXPECT_DOUBLE_EQ(tl->rest_s, 10);
  EXPECT_DOUBLE_EQ(tl->rollout_w, 1000);
  EXPECT_DOUBLE_EQ(tl->rest_w, 200);
  EXPECT_DOUBLE_EQ(tl->held_w, 150);  // never held: the lower of the rest and the floor
  // The site asks for 5 s before step 3.
  Grant g;
  g.job = "j";
  g.term = 1;
  g.seq = 1;
  g.lease = member.status().lease;
  g.job_budget_w = 900;
  g.hold_s = 5;
  g.hold_step = 3;
  ASSERT_TRUE(store.Put("/headroom/s/grants/j", ToJson(g), 0));
  clock.t = 1;
  member.Step();
  EXPECT_EQ(member.Current().state, Acting::State::kGranted);
  EXPECT_DOUBLE_EQ(member.PendingHoldS(), 5);
  member.Observe(30, 200, "train", 10);
  member.Observe(40, 100, "idle", 0);          // the trainer holds
  EXPECT_DOUBLE_EQ(member.PendingHoldS(), 0);  // passed on once
  tl = member.Timeline();
  ASSERT_TRUE(tl);
  EXPECT_DOUBLE_EQ(tl->held_left_s, 5);
  member.Observe(45, 1000, "rollout", 10);
  EXPECT_EQ(member.Timeline()->step, 3);
  EXPECT_DOUBLE_EQ(member.Timeline()->held_w, 100);
  EXPECT_DOUBLE_EQ(member.PendingHoldS(), 0);
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

Member Opportunistic(const std::string& job, double demand_w, LeaseId lease) {
  Member m = M(job, 0, demand_w, lease);
  m.job_class = JobClass::kOpportunistic;
  return m;
}

// Acknowledge every grant in `p` (the members act on them).
void AckAll(const PlanOutput& p, PlanInput& in) {
  for (const Grant& g : p.grants) {
    in.grants[g.job] = g;
    in.acks[g.job] = {g.job, g.term, g.seq, g.lease, g.job_budget_w};
  }
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

// ---- Slurm: suspending and resuming opportunistic members' jobs ----

TEST(Slurm, JobIdsAreDigitsWithAnOptionalArrayTask) {
  for (const char* good : {"1", "12345", "7_0", "7_12", "999999999999999999"}) {
    EXPECT_TRUE(IsSlurmJobId(good)) << good;
  }
  for (const char* bad :
       {"", "0", "012", "12a", "1_", "_1", "1_01", "1 2", "1;rm", "-1", "1234567890123456789"}) {
    EXPECT_FALSE(IsSlurmJobId(bad)) << bad;
  }
  // A member's slurm_job travels in its JSON, checked.
  Member m = Opportunistic("w", 100, 1);
  const std::string id = "42", hostile = "42; rm -rf /";
  m.slurm_job = id;
  auto back = MemberFromJson(ToJson(m), "members/w");
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->slurm_job, "42");
  EXPECT_EQ(MemberFromJson(ToJson(M("a", 1, 2, 1)), "m")->slurm_job, "");
  m.slurm_job = hostile;
  auto bad = MemberFromJson(ToJson(m), "members/w");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("members/w: field 'slurm_job'"), std::string::npos)
      << bad.error().message();
}

TEST(Slurm, TheFakeSchedulerFollowsSlurmsRules) {
  FakeBatchScheduler f;
  f.Add("7");
  EXPECT_FALSE(f.Resume("7"));  // not suspended
  EXPECT_TRUE(f.Suspend("7"));
  EXPECT_FALSE(f.Suspend("7"));  // already
  EXPECT_EQ(f.state("7"), FakeBatchScheduler::State::kSuspended);
  EXPECT_TRUE(f.Resume("7"));
  f.Finish("7");
  EXPECT_FALSE(f.Suspend("7"));
  EXPECT_FALSE(f.Suspend("8"));  // unknown
}

// A leader's status: the ledger and the members as the coordinator would leave them.
CoordinatorStatus Leading(std::map<std::string, std::pair<Member, LedgerJob>> jobs, double pool_w) {
  CoordinatorStatus st;
  st.role = "leader";
  st.ledger = Fresh(1000, 0);
  for (auto& [name, mj] : jobs) {
    mj.second.lease = mj.first.lease;
    mj.second.job_class = mj.first.job_class;
    st.members[name] = mj.first;
    st.ledger->jobs[name] = mj.second;
  }
  st.opportunistic_pool_w = pool_w;
  return st;
}

LedgerJob Granted(double w) {
  LedgerJob j;
  j.grant_w = w;
  j.held_w = w;
  return j;
}

TEST(Slurm, AWorkerAtZeroIsSuspendedAfterTheDelayAndResumedWhenWattsReturn) {
  Suspender s({/*suspend_after_s=*/3.0, /*min_duty=*/0.05, /*resume_fraction=*/0.25});
  Member w = Opportunistic("w", 100, 7);
  const std::string job = "12";
  w.slurm_job = job;
  Member plain = Opportunistic("p", 100, 8);  // not run by Slurm: never touched
  // Granted 0 but still holding 50 (not acknowledged): not yet.
  LedgerJob unacked = Granted(0);
  unacked.held_w = 50;
  EXPECT_TRUE(s.Decide(Leading({{"w", {w, unacked}}, {"p", {plain, Granted(0)}}}, 0), 0).empty());
  // At 0, acknowledged, from t = 1: suspended at t = 4, not before.
  auto zero = Leading({{"w", {w, Granted(0)}}, {"p", {plain, Granted(0)}}}, 0);
  EXPECT_TRUE(s.Decide(zero, 1).empty());
  EXPECT_TRUE(s.Decide(zero, 3.9).empty());
  auto a = s.Decide(zero, 4);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, SuspendAction::Kind::kSuspend);
  EXPECT_EQ(a[0].slurm_job, "12");
  EXPECT_DOUBLE_EQ(a[0].demand_w, 100);
  FakeBatchScheduler slurm;
  slurm.Add("12");
  s.Applied(a[0], slurm.Suspend("12").ok(), 4);
  ASSERT_TRUE(s.suspended().contains("w"));
  // Not a leader: nothing.
  CoordinatorStatus follower = zero;
  follower.role = "follower";
  EXPECT_TRUE(s.Decide(follower, 10).empty());
  // Still registered and granted 4 W (< 5 % of 100): stays; granted 30: resumed.
  EXPECT_TRUE(s.Decide(Leading({{"w", {w, Granted(4)}}}, 4), 5).empty());
  a = s.Decide(Leading({{"w", {w, Granted(30)}}}, 30), 6);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, SuspendAction::Kind::kResume);
  s.Applied(a[0], slurm.Resume("12").ok(), 6);
  EXPECT_TRUE(s.suspended().empty());
  EXPECT_EQ(slurm.state("12"), FakeBatchScheduler::State::kRunning);
}

TEST(Slurm, AJobWhoseLeaseLapsedIsResumedWhenThePoolCoversAQuarterOfItsDemand) {
  Suspender s({3.0, 0.05, 0.25});
  Member w = Opportunistic("w", 100, 7);
  const std::string job = "12";
  w.slurm_job = job;
  auto zero = Leading({{"w", {w, Granted(0)}}}, 0);
  (void)s.Decide(zero, 0);
  auto a = s.Decide(zero, 3);
  ASSERT_EQ(a.size(), 1u);
  s.Applied(a[0], true, 3);
  // Its member gone (stopped, the lease lapsed); another worker wants 60 of a 80 W pool: 20 W
  // spare is under 25 W: stays.
  Member other = Opportunistic("o", 60, 9);
  EXPECT_TRUE(s.Decide(Leading({{"o", {other, Granted(60)}}}, 80), 10).empty());
  // 90 W: 30 W spare: resumed.
  a = s.Decide(Leading({{"o", {other, Granted(60)}}}, 90), 11);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, SuspendAction::Kind::kResume);
  // A resumption that fails (the job ended meanwhile) forgets it.
  s.Applied(a[0], false, 11);
  EXPECT_TRUE(s.suspended().empty());
  // A suspension that fails is tried again after the delay.
  (void)s.Decide(zero, 20);
  a = s.Decide(zero, 23);
  ASSERT_EQ(a.size(), 1u);
  s.Applied(a[0], false, 23);
  EXPECT_TRUE(s.Decide(zero, 25).empty());
  EXPECT_EQ(s.Decide(zero, 26).size(), 1u);
}

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

TEST(Layout, AMembersReplacesIsOptionalAndRoundTrips) {
  Member m = M("x", 300, 400, 1);
  EXPECT_EQ(ToJson(m).find("replaces"), std::string::npos);  // absent when empty
  auto read = MemberFromJson(ToJson(m), "member");
  ASSERT_TRUE(read) << read.error().message();
  EXPECT_EQ(read->replaces, "");
  m.replaces = "host=h boot=b pidns=1 pid=10 start=5";
  read = MemberFromJson(ToJson(m), "member");
  ASSERT_TRUE(read) << read.error().message();
  EXPECT_EQ(read->replaces, m.replaces);
  m.replaces = std::string(513, 'x');
  read = MemberFromJson(ToJson(m), "member");
  ASSERT_FALSE(read);
  EXPECT_NE(read.error().message().find("replaces"), std::string::npos) << read.error().message();
}

TEST(Layout, TheLedgersStandbyRoundTripsAndAMemberWithoutStandbyCountsAtItsFloor) {
  Ledger l = Fresh(1000, 100);
  l.standby["b"] = {40, 300, 7, false};
  l.standby["a@9"] = {30, 300, 9, true};
  auto back = LedgerFromJson(ToJson(l), "ledger");
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->standby.size(), 2u);
  EXPECT_TRUE(back->standby.at("a@9").duplicate);
  EXPECT_DOUBLE_EQ(back->StandbyW(), 70);
  EXPECT_DOUBLE_EQ(back->HeldW(), 70);
  Member m = M("x", 300, 400, 1);
  m.standby_w = -1.0;  // a member written before standby
  auto read = MemberFromJson(ToJson(m), "member");
  ASSERT_TRUE(read);
  EXPECT_LT(read->standby_w, 0.0);
  EXPECT_DOUBLE_EQ(StandbyChargeW(*read), 300);
  read->standby_w = 500;  // above the floor: at most the floor
  EXPECT_DOUBLE_EQ(StandbyChargeW(*read), 300);
  read->standby_w = 20;
  EXPECT_DOUBLE_EQ(StandbyChargeW(*read), 20);
  read->phase = "train";
  EXPECT_DOUBLE_EQ(StandbyChargeW(*read), 300);
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

// ---- The protocol over the in-memory store ----

// One simulated site: coordinators and members stepped in lockstep on one clock, faults by
// name. The auditor keeps, per member, what it last acted on and until when (its Current()), and
// after that its floor: a member that stops running acts on its last budget until that
// deadline, and its trainer's safe actuation after it.
class Site {
 public:
  Site(int jobs, double site_w, double reserve_w, int coordinators) : store_(clock_.fn()) {
    for (int c = 0; c < coordinators; ++c) {
      CoordinatorConfig cc;
      cc.site = "s";
      cc.site_budget_w = site_w;
      cc.reserve_w = reserve_w;
      cc.id = std::to_string(c);
      cc.id.insert(cc.id.begin(), 'c');  // (g++ 12 -O3 -Wrestrict misfires on "c" + ...)
      coordinators_.push_back(std::make_unique<Coordinator>(store_, cc, clock_.fn(), [](auto&) {}));
      coord_up_.push_back(true);
    }
    for (int j = 0; j < jobs; ++j) {
      MemberConfig mc;
      mc.site = "s";
      mc.job = "job" + std::to_string(j);
      mc.nameplate_w = 400 + 100 * j;
      mc.floor_w = 100 + 10 * j;
      mc.local_budget_w = mc.floor_w;
      configs_.push_back(mc);
      members_.push_back(std::make_unique<SiteMember>(store_, mc, clock_.fn(), [](auto&) {}));
      running_.push_back(true);
      acting_.push_back({});
    }
  }

  // One tick of 0.25 s: every running member acts (Current) and steps; each coordinator steps
  // once a second. Then the audit.
  void Tick() {
    clock_.t += 0.25;
    ++ticks_;
    for (size_t j = 0; j < members_.size(); ++j) {
      if (!running_[j]) continue;
      acting_[j] = members_[j]->Current();
      members_[j]->Step();
    }
    if (ticks_ % 4 == 0) {
      for (size_t c = 0; c < coordinators_.size(); ++c) {
        if (coord_up_[c]) coordinators_[c]->Step();
      }
    }
    Audit();
  }

  void Audit() {
    // The budget in force, from the store's ledger (not a coordinator's memory).
    // (While the store is down its ledger cannot change: the last one read stands.)
    auto r = store_.Get("/headroom/s/ledger", false);
    if (r && !r->kvs.empty()) {
      auto parsed = LedgerFromJson(r->kvs[0].value, "ledger");
      ASSERT_TRUE(parsed);
      ledger_ = std::move(*parsed);
    }
    if (!ledger_) return;
    const Ledger* l = &*ledger_;
    double sum_w = 0.0;
    for (size_t j = 0; j < members_.size(); ++j) {
      const Acting& a = acting_[j];
      if (a.state == Acting::State::kLocal) continue;  // outside the site's ledger
      double w = a.job_budget_w;
      if (!running_[j] && clock_.t >= a.valid_until_s) w = configs_[j].floor_w;
      sum_w += w;
      if (a.state == Acting::State::kGranted) full_ = std::max(full_, a.term);
    }
    max_sum_w_ = std::max(max_sum_w_, sum_w);
    if (sum_w > l->site_budget_w - l->reserve_w + 1e-6) ++violations_;
  }

  // Job j becomes an opportunistic member (floor 0: paused without a grant); before any Tick.
  void MakeOpportunistic(size_t j) {
    configs_[j].job_class = JobClass::kOpportunistic;
    configs_[j].floor_w = 0.0;
    configs_[j].local_budget_w = 0.0;
    members_[j] = std::make_unique<SiteMember>(store_, configs_[j], clock_.fn(), [](auto&) {});
  }

  void Run(double s) {
    const int n = static_cast<int>(s / 0.25);
    for (int i = 0; i < n; ++i) Tick();
  }
  // Everyone granted, and the grants add up to the budget or to every demand.
  bool FullyAllocated() {
    for (size_t j = 0; j < members_.size(); ++j) {
      if (running_[j] && acting_[j].state != Acting::State::kGranted) return false;
    }
    return true;
  }

  FakeClock clock_;
  MemoryStore store_;
  std::vector<std::unique_ptr<Coordinator>> coordinators_;
  std::vector<bool> coord_up_;
  std::vector<MemberConfig> configs_;
  std::vector<std::unique_ptr<SiteMember>> members_;
  std::vector<bool> running_;
  std::vector<Acting> acting_;
  uint64_t ticks_ = 0;
  int violations_ = 0;
  double max_sum_w_ = 0.0;
  int64_t full_ = 0;
  std::optional<Ledger> ledger_;
};

// Issue 53: a newcomer draws its standby before admission, without asking; only the reserve
// covers it. The leader warns once per arrival whose standby the reserve in force does not
// cover, and /v1/status and /metrics say by how much.
TEST(CoordinatorReserve, AnArrivalWhoseStandbyTheReserveDoesNotCoverIsWarnedOnceAndShown) {
  FakeClock clock;
  MemoryStore store(clock.fn());
  std::vector<LogEvent> warnings;
  CoordinatorConfig cc;
  cc.site = "s";
  cc.site_budget_w = 3000;
  cc.reserve_w = 100;
  cc.id = "c0";
  Coordinator c(store, cc, clock.fn(), [&warnings](const LogEvent& e) {
    if (e.level == LogLevel::kWarn && e.msg.find("reserve") != std::string::npos) {
      warnings.push_back(e);
    }
  });
  const auto member_config = [](const std::string& job, double standby_w) {
    MemberConfig mc;
    mc.site = "s";
    mc.job = job;
    mc.gpus = 4;
    mc.nameplate_w = 2000;
    mc.floor_w = 1000;
    mc.local_budget_w = 1000;
    mc.standby_w = standby_w;
    return mc;
  };
  // Each period: the members act and step four times, the coordinator once.
  std::vector<std::unique_ptr<SiteMember>> members;
  const auto period = [&] {
    for (int i = 0; i < 4; ++i) {
      clock.t += 0.25;
      for (auto& m : members) {
        m->Current();
        m->Step();
      }
    }
    c.Step();
  };
  period();  // leads; a ledger from the flags
  ASSERT_TRUE(c.leading());
  EXPECT_DOUBLE_EQ(c.status().largest_arrival_standby_w, 0);
  EXPECT_DOUBLE_EQ(ReserveShortW(c.status()), 0);

  // 4 GPUs idle plus the node: 332 W, held at its step boundary, over a 100 W reserve.
  members.push_back(
      std::make_unique<SiteMember>(store, member_config("big", 332), clock.fn(), [](auto&) {}));
  period();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].msg.find("reserve 100.0 W does not cover job 'big'"), std::string::npos)
      << warnings[0].msg;
  EXPECT_NE(warnings[0].msg.find("332.0 W"), std::string::npos) << warnings[0].msg;
  std::map<std::string, LogValue> fields;
  for (const LogField& f : warnings[0].fields) fields.emplace(f.key, f.value);
  EXPECT_EQ(std::get<std::string>(fields.at("job")), "big");
  EXPECT_DOUBLE_EQ(std::get<double>(fields.at("standby_w")), 332);
  EXPECT_DOUBLE_EQ(std::get<double>(fields.at("reserve_w")), 100);
  EXPECT_DOUBLE_EQ(std::get<double>(fields.at("reserve_short_w")), 232);
  EXPECT_DOUBLE_EQ(c.status().largest_arrival_standby_w, 332);
  EXPECT_DOUBLE_EQ(ReserveShortW(c.status()), 332 - 100);
  // Once per arrival: the periods after say nothing more.
  period();
  period();
  EXPECT_EQ(warnings.size(), 1u);
  // A smaller arrival, covered (50 W <= 100 W): no warning; the largest stays.
  members.push_back(
      std::make_unique<SiteMember>(store, member_config("small", 50), clock.fn(), [](auto&) {}));
  period();
  EXPECT_EQ(warnings.size(), 1u);
  EXPECT_DOUBLE_EQ(c.status().largest_arrival_standby_w, 332);

  const nlohmann::json status = nlohmann::json::parse(CoordinatorStatusJson(c.status(), cc));
  EXPECT_DOUBLE_EQ(status["largest_arrival_standby_w"].get<double>(), 332);
  EXPECT_DOUBLE_EQ(status["reserve_short_w"].get<double>(), 232);
  EXPECT_NE(CoordinatorMetricsText(c.status()).find("\nheadroom_site_reserve_short_watts 232\n"),
            std::string::npos)
      << CoordinatorMetricsText(c.status());

  // The operator raises the reserve to 400 W: in force once the grants fit under 3000 - 400.
  ASSERT_TRUE(c.RequestTarget(std::nullopt, 400));
  for (int i = 0; i < 20 && c.status().ledger->reserve_w != 400; ++i) period();
  ASSERT_DOUBLE_EQ(c.status().ledger->reserve_w, 400);
  EXPECT_DOUBLE_EQ(ReserveShortW(c.status()), 0);
  EXPECT_NE(CoordinatorMetricsText(c.status()).find("\nheadroom_site_reserve_short_watts 0\n"),
            std::string::npos);
  // A follower (no ledger of its own): null.
  CoordinatorStatus follower;
  follower.role = "follower";
  const nlohmann::json f = nlohmann::json::parse(CoordinatorStatusJson(follower, cc));
  EXPECT_TRUE(f["reserve_short_w"].is_null());
  EXPECT_TRUE(f["largest_arrival_standby_w"].is_null());
  EXPECT_EQ(warnings.size(), 1u);
}

TEST(Protocol, MembersAreGrantedTheSiteBudgetAndAcknowledge) {
  Site site(4, 1500, 100, 1);
  site.Run(10);
  EXPECT_TRUE(site.FullyAllocated());
  EXPECT_EQ(site.violations_, 0);
  double sum_w = 0.0;
  for (const Acting& a : site.acting_) sum_w += a.job_budget_w;
  EXPECT_NEAR(sum_w, 1400, 1e-6);  // the budget less the reserve: demand is higher
  EXPECT_TRUE(site.coordinators_[0]->leading());
}

TEST(Protocol, FailoverOfTheCoordinatorKeepsGrantsAndRaisesTheTerm) {
  Site site(4, 1500, 100, 2);
  site.Run(10);
  const int first = site.coordinators_[0]->leading() ? 0 : 1;
  const int64_t term = site.coordinators_[first]->status().term;
  site.coord_up_[first] = false;  // SIGKILL: its lease runs out
  site.Run(8);
  EXPECT_TRUE(site.coordinators_[1 - first]->leading());
  EXPECT_GT(site.coordinators_[1 - first]->status().term, term);
  site.members_[0]->Current();
  EXPECT_TRUE(site.FullyAllocated());
  EXPECT_EQ(site.violations_, 0);
  // The counters behind /metrics: one election each, no loss seen yet (the stopped one has not
  // run since).
  EXPECT_EQ(site.coordinators_[first]->status().elections_won, 1u);
  EXPECT_EQ(site.coordinators_[1 - first]->status().elections_won, 1u);
  EXPECT_EQ(site.coordinators_[first]->status().leadership_lost, 0u);
  // SIGCONT: the old leader finds its lease gone and steps down, once.
  site.coord_up_[first] = true;
  site.Run(4);
  EXPECT_FALSE(site.coordinators_[first]->leading());
  EXPECT_EQ(site.coordinators_[first]->status().leadership_lost, 1u);
  EXPECT_EQ(site.coordinators_[1 - first]->status().leadership_lost, 0u);
  // A resignation (SIGTERM) is not a loss; the other replica is elected a second time.
  site.coordinators_[1 - first]->Resign();
  site.coord_up_[1 - first] = false;
  site.Run(4);
  EXPECT_EQ(site.coordinators_[1 - first]->status().leadership_lost, 0u);
  EXPECT_TRUE(site.coordinators_[first]->leading());
  EXPECT_EQ(site.coordinators_[first]->status().elections_won, 2u);
  EXPECT_EQ(site.violations_, 0);
}

TEST(Protocol, AStoppedMemberIsFencedBeforeItsWattsMove) {
  Site site(4, 1500, 100, 1);
  site.Run(10);
  site.running_[1] = false;  // SIGSTOP
  site.Run(12);
  EXPECT_EQ(site.violations_, 0);
  // Its watts went to the others.
  double others_w = 0.0;
  for (int j : {0, 2, 3}) others_w += site.acting_[j].job_budget_w;
  EXPECT_NEAR(others_w, 1400 - site.configs_[1].floor_w, 1e-6);
  site.running_[1] = true;  // SIGCONT: fenced at once, then registers again
  site.Tick();
  EXPECT_EQ(site.acting_[1].state, Acting::State::kFenced);
  EXPECT_EQ(site.members_[1]->status().acting, Acting::State::kFenced);
  // Fenced means held: the step under way ends on the floor, no other starts (issue 53).
  EXPECT_TRUE(site.acting_[1].hold_until_admitted);
  EXPECT_DOUBLE_EQ(site.acting_[1].job_budget_w, site.configs_[1].floor_w);
  // Registered again, it waits for a grant for its new lease still held, as a newcomer; it
  // publishes its standby (what it draws held), not its floor.
  for (int k = 0; k < 10 && site.members_[1]->status().lease == 0; ++k) site.Tick();
  if (site.acting_[1].state == Acting::State::kFenced) {
    EXPECT_TRUE(site.acting_[1].hold_until_admitted);
  }
  site.Run(10);
  EXPECT_TRUE(site.FullyAllocated());
  EXPECT_EQ(site.violations_, 0);
  // The counters behind the agent's /metrics: the stopped member was fenced once and its lease
  // was lost once; the others neither.
  for (size_t j = 0; j < site.members_.size(); ++j) {
    const MemberStatus st = site.members_[j]->status();
    EXPECT_EQ(st.fences, j == 1 ? 1u : 0u) << j;
    EXPECT_EQ(st.leases_lost, j == 1 ? 1u : 0u) << j;
    EXPECT_EQ(st.acting, Acting::State::kGranted) << j;
  }
}

TEST(Protocol, SiteBudgetDecreaseSettlesDownFirst) {
  Site site(4, 1500, 100, 1);
  site.Run(10);
  ASSERT_TRUE(site.coordinators_[0]->RequestSiteBudget(1000));
  site.Run(6);
  EXPECT_EQ(site.violations_, 0);
  const auto& st = site.coordinators_[0]->status();
  ASSERT_EQ(st.decrease_settle_s.size(), 1u);
  EXPECT_LE(st.decrease_settle_s[0], 3.0);
  EXPECT_DOUBLE_EQ(st.ledger->site_budget_w, 1000);
  double sum_w = 0.0;
  for (const Acting& a : site.acting_) sum_w += a.job_budget_w;
  EXPECT_NEAR(sum_w, 900, 1e-6);
  // Below the floors plus the reserve: refused with the numbers.
  auto refused = site.coordinators_[0]->RequestSiteBudget(300);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("below the floors of the running jobs 460.0 W"),
            std::string::npos)
      << refused.error().message();
}

TEST(Protocol, AnOpportunisticMemberLivesOnWhatIsLeftAndShrinksFirst) {
  Site site(4, 2500, 100, 1);  // nameplates 400, 500, 600, 700 W; job3 opportunistic
  site.MakeOpportunistic(3);
  site.Run(10);
  EXPECT_TRUE(site.FullyAllocated());
  // The guaranteed jobs at their demand (1,500 W), job3 at its 700 W out of the 900 W left.
  EXPECT_NEAR(
      site.acting_[0].job_budget_w + site.acting_[1].job_budget_w + site.acting_[2].job_budget_w,
      1500, 1e-6);
  EXPECT_NEAR(site.acting_[3].job_budget_w, 700, 1e-6);
  // The site budget falls to 1,800 W: only job3 gives (to 200 W); the guaranteed keep theirs.
  ASSERT_TRUE(site.coordinators_[0]->RequestSiteBudget(1800));
  site.Run(6);
  EXPECT_NEAR(site.acting_[3].job_budget_w, 200, 1e-6);
  EXPECT_NEAR(site.acting_[0].job_budget_w, 400, 1e-6);
  // To 1,500 W: job3 pauses (0 W); below that the guaranteed share the cut.
  ASSERT_TRUE(site.coordinators_[0]->RequestSiteBudget(1500));
  site.Run(6);
  EXPECT_NEAR(site.acting_[3].job_budget_w, 0, 1e-6);
  EXPECT_EQ(site.acting_[3].state, Acting::State::kGranted);
  EXPECT_EQ(site.violations_, 0);
}

TEST(Protocol, ASecondAgentWithATakenJobNameIsRefused) {
  Site site(2, 1500, 100, 1);
  site.Run(4);
  SiteMember dup(site.store_, site.configs_[0], site.clock_.fn(), [](auto&) {});
  dup.Step();
  EXPECT_NE(dup.status().refused.find("job name 'job0' is taken"), std::string::npos)
      << dup.status().refused;
  // It acts on its standby, held, and is counted at standby under a key of its own.
  const Acting a = dup.Current();
  EXPECT_EQ(a.state, Acting::State::kStandby);
  EXPECT_TRUE(a.hold_until_admitted);
  EXPECT_TRUE(dup.status().duplicate);
  auto dups = site.store_.Get("/headroom/s/members/job0@", true);
  ASSERT_TRUE(dups);
  ASSERT_EQ(dups->kvs.size(), 1u);
  EXPECT_EQ(MemberFromJson(dups->kvs[0].value, "dup")->job, "job0");
}

TEST(Protocol, ARestartedAgentTakesItsGonePredecessorsPlaceAtOnce) {
  Site site(3, 1500, 100, 1);
  // job0's agent says who it is; the restarted one knows whether that process still runs.
  site.configs_[0].holder = "pid=1";
  site.members_[0] =
      std::make_unique<SiteMember>(site.store_, site.configs_[0], site.clock_.fn(), [](auto&) {});
  site.Run(8);
  ASSERT_TRUE(site.FullyAllocated());
  const LeaseId before = site.members_[0]->status().lease;

  // Still running (or not known gone): the name stays taken.
  MemberConfig alive = site.configs_[0];
  alive.holder = "pid=2";
  alive.holder_gone = [](std::string_view) { return false; };
  SiteMember dup(site.store_, alive, site.clock_.fn(), [](auto&) {});
  dup.Step();
  EXPECT_FALSE(dup.status().registered);
  EXPECT_NE(dup.status().refused.find("is taken"), std::string::npos);

  // SIGKILL, then a restart that knows pid 1 is gone: refused until TTL - margin after its own
  // start (what the dead agent's trainer may still act on runs out by then), then registered
  // at once, before the old lease's TTL, and granted within two periods.
  MemberConfig restarted = site.configs_[0];
  restarted.holder = "pid=3";
  restarted.holder_gone = [](std::string_view h) { return h == "pid=1"; };
  site.members_[0] =
      std::make_unique<SiteMember>(site.store_, restarted, site.clock_.fn(), [](auto&) {});
  site.members_[0]->Step();
  EXPECT_FALSE(site.members_[0]->status().registered);
  site.clock_.t += 3 - 1 - 1e-6;  // TTL 3 s, margin 1 s: not yet
  site.members_[0]->Step();
  EXPECT_FALSE(site.members_[0]->status().registered);
  site.clock_.t += 2e-6;
  site.members_[0]->Step();
  EXPECT_TRUE(site.members_[0]->status().registered);
  EXPECT_NE(site.members_[0]->status().lease, before);
  auto kept = site.store_.LeaseKeepAlive(before);
  ASSERT_FALSE(kept);
  EXPECT_TRUE(IsLeaseGone(kept.error())) << kept.error().message();
  site.Run(2.0);
  EXPECT_TRUE(site.FullyAllocated());
  EXPECT_EQ(site.violations_, 0);
  auto m = site.store_.Get("/headroom/s/members/job0", false);
  ASSERT_TRUE(m && m->kvs.size() == 1);
  EXPECT_EQ(MemberFromJson(m->kvs[0].value, "member")->holder, "pid=3");
}

// Issue 53: the restarted agent names the predecessor it saw gone in its duplicate key at once
// (not a period later), and the leader counts the job's GPUs once: no false OVERCOMMITTED on a
// site near its floors.
TEST(Protocol, ARestartedAgentsDuplicateNamesItsGonePredecessorAndIsCountedOnce) {
  // Budget 300 - reserve 60 = 240 W; floors 100 + 110 = 210 W: a 60 W standby on top of job0's
  // floor would be 30 W over.
  Site site(2, 300, 60, 1);
  site.configs_[0].holder = "pid=1";
  site.configs_[0].standby_w = 60;
  site.members_[0] =
      std::make_unique<SiteMember>(site.store_, site.configs_[0], site.clock_.fn(), [](auto&) {});
  site.Run(8);
  ASSERT_TRUE(site.FullyAllocated());
  Coordinator& leader = *site.coordinators_[0];
  ASSERT_TRUE(leader.leading());

  MemberConfig restarted = site.configs_[0];
  restarted.holder = "pid=3";
  restarted.holder_gone = [](std::string_view h) { return h == "pid=1"; };
  site.members_[0] =
      std::make_unique<SiteMember>(site.store_, restarted, site.clock_.fn(), [](auto&) {});
  site.members_[0]->Step();
  ASSERT_TRUE(site.members_[0]->status().duplicate);
  // Its first Step put the duplicate key, then again naming pid 1 once it saw it gone.
  auto dups = site.store_.Get("/headroom/s/members/job0@", true);
  ASSERT_TRUE(dups);
  ASSERT_EQ(dups->kvs.size(), 1u);
  auto published = MemberFromJson(dups->kvs[0].value, "dup");
  ASSERT_TRUE(published) << published.error().message();
  EXPECT_EQ(published->replaces, "pid=1");
  EXPECT_EQ(published->holder, "pid=3");
  EXPECT_DOUBLE_EQ(published->standby_w, 60);
  // The name's own value names no predecessor.
  auto name = site.store_.Get("/headroom/s/members/job0", false);
  ASSERT_TRUE(name && name->kvs.size() == 1u);
  EXPECT_EQ(MemberFromJson(name->kvs[0].value, "member")->replaces, "");

  const std::string dup_name = dups->kvs[0].key.substr(std::string("/headroom/s/members/").size());
  leader.Step();
  ASSERT_TRUE(leader.status().ledger);
  ASSERT_TRUE(leader.status().ledger->standby.contains(dup_name));
  EXPECT_NEAR(leader.status().ledger->standby.at(dup_name).standby_w, 0, 1e-9);  // 60 - 100 < 0
  EXPECT_NEAR(leader.status().overcommitted_w, 0, 1e-9);
  EXPECT_NEAR(leader.status().ledger->HeldW(), 240, 1e-6);

  // TTL - margin after its start it takes the name; the job is granted again, never over.
  site.Run(5);
  EXPECT_TRUE(site.members_[0]->status().registered);
  EXPECT_TRUE(site.FullyAllocated());
  EXPECT_FALSE(leader.status().ledger->standby.contains(dup_name));
  EXPECT_NEAR(leader.status().overcommitted_w, 0, 1e-9);
  EXPECT_EQ(site.violations_, 0);
}

// F6: after etcd loses its state (a new cluster on empty data), agents that had seen higher
// terms ignored the new leader for good and sat at their floors. The store's revision going back
// tells them (and the coordinators) to forget the terms and epochs seen: all follow the new
// leader within the lease TTL and two periods, and the invariant holds throughout.
TEST(Protocol, AfterTheStoreLosesItsStateEveryoneFollowsTheNewLeader) {
  Site site(3, 1500, 100, 2);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(site.store_.Put("/other", "x", 0));  // an older history
  site.Run(8);
  ASSERT_TRUE(site.FullyAllocated());
  int64_t old_term = 0;
  for (const Acting& a : site.acting_) old_term = std::max(old_term, a.term);
  ASSERT_GT(old_term, 50);  // far above what the new store's revisions reach meanwhile
  // job2's agent stops as the state is lost (a frozen VM): it never registers again, and its
  // trainer may draw its floor -- which the new ledger must keep, as for an expired lease.
  site.running_[2] = false;
  site.store_.LoseState();
  site.Run(3 + 2 + 1);  // TTL 3 s, two periods of 1 s, and the new ledger's first period
  EXPECT_TRUE(site.FullyAllocated());
  for (size_t j = 0; j < 2; ++j) {
    EXPECT_EQ(site.acting_[j].state, Acting::State::kGranted);
    EXPECT_LT(site.acting_[j].term, old_term);  // the new leader's
  }
  for (size_t j = 0; j < 2; ++j) EXPECT_GE(site.members_[j]->status().store_resets, 1u);
  {
    auto stored = site.store_.Get("/headroom/s/ledger", false);
    ASSERT_TRUE(stored && stored->kvs.size() == 1);
    const Ledger kept = *LedgerFromJson(stored->kvs[0].value, "ledger");
    ASSERT_TRUE(kept.jobs.contains("job2"));
    EXPECT_EQ(kept.jobs.at("job2").lease, 0);
    EXPECT_DOUBLE_EQ(kept.jobs.at("job2").held_w, site.configs_[2].floor_w);
  }
  // And the new store's grants are acknowledged (their sequences start again): a decrease
  // comes in force.
  bool asked = false;
  for (auto& c : site.coordinators_) asked = asked || c->RequestSiteBudget(900);
  ASSERT_TRUE(asked);
  site.Run(4);
  auto l = site.store_.Get("/headroom/s/ledger", false);
  ASSERT_TRUE(l && l->kvs.size() == 1);
  EXPECT_DOUBLE_EQ(LedgerFromJson(l->kvs[0].value, "ledger")->site_budget_w, 900);
  EXPECT_EQ(site.violations_, 0);
}

// Found by make chaos (1,000 faults): after etcd was wiped, a replica that had never led won the
// election and built the new ledger from its flags, so the operator's last cut was lost and
// eight agents were granted 4,336 W under a 4,097 W limit (a replica that had led long before
// would have taken its own stale ledger the same way). Followers read the ledger each period:
// whichever replica wins starts from the site's last ledger.
TEST(Protocol, AfterTheStoreLosesItsStateAFollowerThatLeadsKeepsTheOperatorsLastCut) {
  Site site(3, 1500, 100, 2);
  site.Run(8);
  ASSERT_TRUE(site.FullyAllocated());
  const size_t leader = site.coordinators_[0]->leading() ? 0 : 1;
  ASSERT_TRUE(site.coordinators_[leader]->leading());
  ASSERT_FALSE(site.coordinators_[1 - leader]->leading());
  ASSERT_TRUE(site.coordinators_[leader]->RequestSiteBudget(900));
  site.Run(4);
  // The replica that led goes with the state; the other (flags: 1,500 W) leads next.
  site.coord_up_[leader] = false;
  site.store_.LoseState();
  site.max_sum_w_ = 0.0;
  site.Run(3 + 2 + 4);
  EXPECT_TRUE(site.coordinators_[1 - leader]->leading());
  EXPECT_TRUE(site.FullyAllocated());
  auto l = site.store_.Get("/headroom/s/ledger", false);
  ASSERT_TRUE(l && l->kvs.size() == 1);
  const Ledger rebuilt = *LedgerFromJson(l->kvs[0].value, "ledger");
  EXPECT_DOUBLE_EQ(rebuilt.target_site_budget_w, 900.0);
  EXPECT_DOUBLE_EQ(rebuilt.site_budget_w, 900.0);
  // What the agents acted on, after the loss: never above the cut less the reserve.
  EXPECT_LE(site.max_sum_w_, 900.0 - 100.0 + 1e-6);
  EXPECT_EQ(site.violations_, 0);
}

// F5 with epochs: a ledger deleted (etcdctl del) is rebuilt under a new epoch; agents follow
// its grants though its sequence starts again.
TEST(Protocol, ARebuiltLedgerStartsANewEpochThatAgentsFollow) {
  Site site(2, 1500, 100, 1);
  site.Run(8);
  ASSERT_TRUE(site.FullyAllocated());
  const int64_t seq_before = site.acting_[0].seq;
  Store& store = site.store_;
  ASSERT_TRUE(store.Delete("/headroom/s/ledger", false));
  site.Run(4);
  EXPECT_TRUE(site.FullyAllocated());
  auto g = site.store_.Get("/headroom/s/grants/job0", false);
  ASSERT_TRUE(g && g->kvs.size() == 1);
  auto grant = GrantFromJson(g->kvs[0].value, "grant");
  ASSERT_TRUE(grant);
  auto l = site.store_.Get("/headroom/s/ledger", false);
  ASSERT_TRUE(l && l->kvs.size() == 1);
  EXPECT_EQ(grant->epoch, l->kvs[0].create_revision);
  EXPECT_EQ(site.acting_[0].seq, grant->seq);
  (void)seq_before;
  EXPECT_EQ(site.violations_, 0);
}

// A ledger deleted just after a cut was written (chaos under make test's load): the rebuilt
// ledger took the cut as in force at once, while the agents acted on the deleted ledger's grants
// (4,057 W over a 3,987.5 W limit for 1.3 s). It starts in force where the stored grants are and
// the cut comes into force as a decrease does, once they are down.
TEST(Protocol, ALedgerDeletedJustAfterACutTakesTheCutAsADecrease) {
  Site site(2, 800, 100, 1);
  site.Run(8);
  ASSERT_TRUE(site.FullyAllocated());
  ASSERT_NEAR(site.acting_[0].job_budget_w + site.acting_[1].job_budget_w, 700.0, 1e-6);
  ASSERT_TRUE(site.coordinators_[0]->RequestSiteBudget(600).ok());
  ASSERT_TRUE(site.store_.Delete("/headroom/s/ledger", false));
  site.Run(12);
  EXPECT_EQ(site.violations_, 0);
  EXPECT_TRUE(site.FullyAllocated());
  auto l = site.store_.Get("/headroom/s/ledger", false);
  ASSERT_TRUE(l && l->kvs.size() == 1);
  const Ledger rebuilt = *LedgerFromJson(l->kvs[0].value, "ledger");
  EXPECT_DOUBLE_EQ(rebuilt.site_budget_w, 600);
  EXPECT_NEAR(site.acting_[0].job_budget_w + site.acting_[1].job_budget_w, 500.0, 1e-6);
}

// F9: a duplicate started long before the name's holder dies took the name at once, while the
// dead agent's trainer could still act on its last grant. It waits TTL - margin from when it
// first sees the holder gone.
TEST(Protocol, ADuplicateTakesADeadHoldersNameOnlyOnceWhatItGrantedRunsOut) {
  Site site(2, 1500, 100, 1);
  site.configs_[0].holder = "pid=1";
  site.members_[0] =
      std::make_unique<SiteMember>(site.store_, site.configs_[0], site.clock_.fn(), [](auto&) {});
  site.Run(8);
  ASSERT_TRUE(site.FullyAllocated());
  bool dead = false;
  MemberConfig second = site.configs_[0];
  second.holder = "pid=2";
  second.holder_gone = [&dead](std::string_view h) { return dead && h == "pid=1"; };
  SiteMember dup(site.store_, second, site.clock_.fn(), [](auto&) {});
  dup.Step();
  ASSERT_TRUE(dup.status().duplicate);
  site.Run(30);  // long after the duplicate's start, pid 1 still running
  dup.Step();
  ASSERT_TRUE(dup.status().duplicate);
  dead = true;  // pid 1 dies now
  dup.Step();
  EXPECT_FALSE(dup.status().registered);  // its trainer may act for TTL - margin more
  site.clock_.t += 2 - 1e-3;
  dup.Step();
  EXPECT_FALSE(dup.status().registered);
  site.clock_.t += 2e-3;
  dup.Step();
  EXPECT_TRUE(dup.status().registered);
  EXPECT_FALSE(dup.status().duplicate);
  // Its duplicate key went with the registration.
  auto dups = site.store_.Get("/headroom/s/members/job0@", true);
  ASSERT_TRUE(dups);
  EXPECT_TRUE(dups->kvs.empty());
}

TEST(Protocol, MalformedValuesAreIgnoredNotTrusted) {
  Site site(2, 1500, 100, 1);
  site.Run(4);
  ASSERT_TRUE(site.store_.Put("/headroom/s/members/evil", "{\"job\":", 0));
  ASSERT_TRUE(site.store_.Put("/headroom/s/acks/job0", "[1,2]", 0));
  site.Run(4);
  const uint64_t malformed = site.coordinators_[0]->status().malformed_values;
  EXPECT_GT(malformed, 0u);
  EXPECT_EQ(site.violations_, 0);
  EXPECT_TRUE(site.FullyAllocated());
  // Counted once for each value (key and revision), not again at every period that reads it:
  // `members/evil` stays as it is.
  site.Run(4);
  EXPECT_EQ(site.coordinators_[0]->status().malformed_values, malformed);
}

TEST(Protocol, UnknownOutcomesAreResolvedByTheRequestId) {
  Site site(3, 1500, 100, 1);
  site.Run(2);
  site.store_.FailNextWriteAfterApply();
  site.Run(6);
  EXPECT_GE(site.coordinators_[0]->status().unknown_outcomes +
                site.coordinators_[0]->status().ledger_writes,
            1u);
  EXPECT_EQ(site.violations_, 0);
  EXPECT_TRUE(site.FullyAllocated());
}

TEST(Protocol, ASiteOfManyJobsWritesItsGrantsInTransactionsEtcdTakes) {
  Site site(300, 600000, 0, 1);  // floors: 478,500 W
  site.Run(6);
  EXPECT_TRUE(site.FullyAllocated());
  EXPECT_EQ(site.violations_, 0);
  EXPECT_EQ(site.coordinators_[0]->status().ledger->jobs.size(), 300u);
}

// An agent's threads on one member: a coordinator and a member on a store whose clock the test
// advances from the thread that steps them, and a runner thread that asks the member what to
// act on, as the agent's runner does (under TSan in `make test-tsan`).
// g++ 12 at -O3 warns wrongly on the short strings assigned here (-Wrestrict, GCC PR 105651):
// where the warning lands moves with whatever else the unity build puts in this file.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wrestrict"
struct ThreadedMember {
  explicit ThreadedMember(double grant_read_s) {
    CoordinatorConfig cc;
    cc.site = "s";
    cc.site_budget_w = 1000;
    cc.id = "c";
    coordinator = std::make_unique<Coordinator>(
        store, cc, [this] { return now.load(); }, [](auto&) {});
    MemberConfig mc;
    mc.site = "s";
    mc.job = "j";
    mc.nameplate_w = 800;
    mc.floor_w = 100;
    mc.local_budget_w = 100;
    mc.grant_read_s = grant_read_s;
    member = std::make_unique<SiteMember>(
        store, mc, [this] { return now.load(); }, [](auto&) {});
    runner = std::thread([this] {
      while (!done.load()) {
        const Acting a = member->Current();
        EXPECT_LE(a.job_budget_w, 1000.0);
        member->Observe(now.load(), 300.0, "rollout", 10.0);
      }
    });
  }
  ~ThreadedMember() {
    done.store(true);
    if (runner.joinable()) runner.join();
  }
  // 400 quarter-seconds of Step, the coordinator every fourth; `at(i)` before each.
  void Run(const std::function<void(int)>& at = {}) {
    for (int i = 0; i < 400; ++i) {
      now.store(now.load() + 0.25);
      member->Step();
      if (i % 4 == 0) coordinator->Step();
      if (at) at(i);
    }
  }

  std::atomic<double> now{0.0};
  MemoryStore store{[this] { return now.load(); }};
  std::unique_ptr<Coordinator> coordinator;
  std::unique_ptr<SiteMember> member;
  std::atomic<bool> done{false};
  std::thread runner;
};
#pragma GCC diagnostic pop

TEST(MemberThreads, StepAndCurrentRunConcurrently) {
  ThreadedMember t(0.0);
  t.Run();
  t.done.store(true);
  t.runner.join();
  EXPECT_EQ(t.member->Current().state, Acting::State::kGranted);
  EXPECT_DOUBLE_EQ(t.member->Current().job_budget_w, 800.0);
}

// A member whose grant is watched: a grant written reaches Current() through the watch, with
// no read of the grant key in between (docs/FLEET.md, "Members watch their grant").
TEST(MemberWatch, AGrantWrittenIsServedFromTheWatchAndAStoreResetIsSeen) {
  FakeClock clock;
  MemoryStore store(clock.fn());
  CoordinatorConfig cc;
  cc.site = "s";
  cc.site_budget_w = 1000;
  cc.id = "c";
  Coordinator coordinator(store, cc, clock.fn(), [](auto&) {});
  MemberConfig mc;
  mc.site = "s";
  mc.job = "j";
  mc.nameplate_w = 800;
  mc.floor_w = 100;
  mc.local_budget_w = 100;
  mc.grant_read_s = 1e9;  // Step reads the grant once, then only the watch brings it
  CountingStore counted(store);
  SiteMember member(counted, mc, clock.fn(), [](auto&) {});
  EXPECT_FALSE(member.WatchGrant(1.0).ok());  // nothing read yet: nowhere to resume from
  int taken = 0;
  for (int i = 0; i < 80 && member.Current().job_budget_w != 800.0; ++i) {
    clock.t += 0.25;
    member.Step();
    if (i % 4 == 0) coordinator.Step();
    ASSERT_TRUE(member.WatchGrant(1.0, [&] { ++taken; }).ok());
  }
  ASSERT_EQ(member.Current().state, Acting::State::kGranted);
  EXPECT_DOUBLE_EQ(member.Current().job_budget_w, 800.0);
  EXPECT_GE(taken, 1);
  // A site budget cut: the coordinator's next Step writes the grant; Step does not read it.
  const int64_t seq = member.Current().seq;
  ASSERT_TRUE(coordinator.RequestSiteBudget(500).ok());
  clock.t += 0.25;
  coordinator.Step();
  member.Step();
  EXPECT_EQ(member.Current().seq, seq);
  taken = 0;
  ASSERT_TRUE(member.WatchGrant(1.0, [&] { ++taken; }).ok());
  EXPECT_EQ(taken, 1);
  EXPECT_GT(member.Current().seq, seq);
  EXPECT_DOUBLE_EQ(member.Current().job_budget_w, 500.0);
  // Nothing new: the watch tells nothing.
  taken = 0;
  ASSERT_TRUE(member.WatchGrant(1.0, [&] { ++taken; }).ok());
  EXPECT_EQ(taken, 0);
  // The store's state lost: the watch sees its revision behind what it read.
  store.LoseState();
  ASSERT_TRUE(member.WatchGrant(1.0).ok());
  EXPECT_EQ(member.status().store_resets, 1u);
  EXPECT_FALSE(member.WatchGrant(1.0).ok());  // read afresh first, by Step
}

// The watch on its own thread beside Step's and the runner's (TSan).
TEST(MemberThreads, TheWatchRunsBesideStepAndCurrent) {
  ThreadedMember t(1.0);
  std::atomic<int> taken{0};
  std::thread watcher([&] {
    while (!t.done.load()) (void)t.member->WatchGrant(0.1, [&] { ++taken; });
  });
  t.Run([&](int i) {
    if (i == 200) {
      ASSERT_TRUE(t.coordinator->RequestSiteBudget(600).ok());
    }
  });
  t.done.store(true);
  t.member->StopWatching();
  t.runner.join();
  watcher.join();
  EXPECT_EQ(t.member->Current().state, Acting::State::kGranted);
  EXPECT_DOUBLE_EQ(t.member->Current().job_budget_w, 600.0);
}

// Random faults over a long run: stops, restarts, coordinator kills, store outages, lease
// extensions (an etcd leader failover), budget changes. The invariant holds at every tick.
TEST(Protocol, RandomFaultsNeverBreakTheInvariant) {
  Site site(8, 3000, 100, 2);
  std::mt19937_64 rng(7);
  site.Run(10);
  for (int fault = 0; fault < 200; ++fault) {
    const int kind = std::uniform_int_distribution<int>(0, 6)(rng);
    const size_t j = std::uniform_int_distribution<size_t>(0, 7)(rng);
    switch (kind) {
      case 0:
        site.running_[j] = !site.running_[j];
        break;  // stop / continue
      case 1:   // kill and restart: a new member object, same job
        site.members_[j] = std::make_unique<SiteMember>(site.store_, site.configs_[j],
                                                        site.clock_.fn(), [](auto&) {});
        site.acting_[j] = site.members_[j]->Current();
        site.running_[j] = true;
        break;
      case 2: {
        const size_t c = j % 2;
        site.coord_up_[c] = !site.coord_up_[c];
        if (!site.coord_up_[0] && !site.coord_up_[1]) site.coord_up_[1 - c] = true;
        if (site.coord_up_[c]) {
          CoordinatorConfig cc;
          cc.site = "s";
          cc.site_budget_w = 3000;
          cc.reserve_w = 100;
          cc.id = "c" + std::to_string(c) + "-" + std::to_string(fault);
          site.coordinators_[c] =
              std::make_unique<Coordinator>(site.store_, cc, site.clock_.fn(), [](auto&) {});
        }
        break;
      }
      case 3:
        site.store_.ExtendLeases(1.5);
        break;
      case 4: {
        site.store_.SetUnavailable(true);
        site.Run(std::uniform_real_distribution<double>(0.25, 4.0)(rng));
        site.store_.SetUnavailable(false);
        break;
      }
      case 5: {
        for (auto& c : site.coordinators_) {
          if (c->leading())
            (void)c->RequestSiteBudget(std::uniform_real_distribution<double>(1500, 3500)(rng));
        }
        break;
      }
      default:
        site.store_.FailNextWriteAfterApply();
        break;
    }
    site.Run(std::uniform_real_distribution<double>(0.25, 3.0)(rng));
    ASSERT_EQ(site.violations_, 0) << "after fault " << fault << " (kind " << kind << ")";
  }
  for (size_t j = 0; j < 8; ++j) site.running_[j] = true;
  site.coord_up_[0] = site.coord_up_[1] = true;
  site.Run(20);
  EXPECT_TRUE(site.FullyAllocated());
  EXPECT_EQ(site.violations_, 0);
}

// The member's session (coord/member_session.h) on its own threads: it registers the member and
// keeps its lease; Stop ends both threads at once although the grant's watch would wait 30 s
// for a change, and the member leaves after (its key gone with its lease).
TEST(MemberThreads, ASessionKeepsTheMemberUntilStoppedAtOnce) {
  std::atomic<double> now{0.0};
  MemoryStore store([&now] { return now.load(); });
  MemberConfig mc;
  mc.site = "s";
  mc.job = "j";
  mc.nameplate_w = 800;
  mc.floor_w = 100;
  mc.local_budget_w = 100;
  mc.grant_read_s = 1.0;
  SiteMember member(
      store, mc, [&now] { return now.load(); }, [](auto&) {});
  const Keys keys("s");
  const auto registered = [&] {
    auto r = store.Get(keys.member("j"), false);
    return r.ok() && !r->kvs.empty();
  };
  std::atomic<int> steps{0};
  MemberSession session(member, {0.01, /*watch=*/true, 30.0, [&steps] { ++steps; }});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!registered() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polls a condition
  }
  ASSERT_TRUE(registered());
  const auto stop_at = std::chrono::steady_clock::now();
  session.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - stop_at, std::chrono::seconds(5));
  EXPECT_GE(steps.load(), 1);
  EXPECT_TRUE(registered());  // stopping the threads is not leaving
  const int after = steps.load();
  member.Leave();
  EXPECT_FALSE(registered());
  EXPECT_EQ(steps.load(), after);  // nothing steps once stopped
  session.Stop();                  // again: nothing
}

// A lease kept alive on its own thread: renewed while the store has it, lost for good once the
// store revokes it (the thread ends), and stopped at once whatever the period.
TEST(MemberThreads, ALeaseKeeperRenewsUntilTheLeaseIsGoneAndStopsAtOnce) {
  MemoryStore store([] { return 0.0; });
  auto lease = store.LeaseGrant(10);
  ASSERT_TRUE(lease.ok());
  const auto wait_for = [](const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // polls a condition
    }
    return done();
  };
  LeaseKeeper keeper(store, *lease, 0.002);
  ASSERT_TRUE(wait_for([&] { return keeper.renewals() >= 3; }));
  EXPECT_FALSE(keeper.lost());
  ASSERT_TRUE(store.LeaseRevoke(*lease).ok());
  ASSERT_TRUE(wait_for([&] { return keeper.lost(); }));
  const int64_t renewed = keeper.renewals();
  keeper.Stop();  // the thread has ended already: joins at once
  EXPECT_EQ(keeper.renewals(), renewed);

  auto other = store.LeaseGrant(10);
  ASSERT_TRUE(other.ok());
  LeaseKeeper slow(store, *other, 1000.0);
  const auto stop_at = std::chrono::steady_clock::now();
  slow.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - stop_at, std::chrono::seconds(5));
  EXPECT_EQ(slow.renewals(), 0);
  EXPECT_FALSE(slow.lost());
  slow.Stop();  // again: nothing
}

}  // namespace
}  // namespace headroom::coord
