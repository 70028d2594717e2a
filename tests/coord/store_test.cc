// The in-memory store's semantics (revisions, transactions, leases on the injected clock,
// watches, compaction, faults), the counting store, and the layout's values through their JSON.
#include <gtest/gtest.h>

#include <string>

#include "coord/coord_test_util.h"
#include "coord/counting_store.h"
#include "coord/layout.h"
#include "coord/memory_store.h"

namespace headroom::coord {
namespace {

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

}  // namespace
}  // namespace headroom::coord
