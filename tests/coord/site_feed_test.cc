// The leader's view fed by a watch (coord/site_feed.h, coordinator.cc ReadView; issue 55): the
// feeds' batches, and a leader that lists its site once per term and plans on the view exactly
// as one that reads the whole prefix every period.
#include <gtest/gtest.h>

#include <limits>

#include "coord/coordinator.h"
#include "coord/forwarding_store.h"
#include "coord/memory_store.h"
#include "coord/site_feed.h"
#include "coord/site_view.h"
#include "coord_test_util.h"

namespace headroom::coord {
namespace {

TEST(PolledFeed, HandsTheChangesAfterARevisionAndAQuietPrefixIsCurrentToTheStore) {
  FakeClock clock;
  MemoryStore store(clock.fn());
  ASSERT_TRUE(store.Put("/s/a", "1", 0));
  const int64_t listed = *store.Put("/s/b", "2", 0);
  ASSERT_TRUE(store.Put("/s/a", "3", 0));
  ASSERT_TRUE(store.Delete("/s/b", false));
  PolledFeed feed(store, "/s/");
  auto changes = feed.Changes(listed, 0, 0.0);
  ASSERT_TRUE(changes);
  ASSERT_EQ(changes->size(), 1u);
  ASSERT_EQ((*changes)[0].events.size(), 2u);
  EXPECT_EQ((*changes)[0].revision, listed + 2);
  // Writes outside the prefix only: the view is current to the store's revision.
  const int64_t outside = *store.Put("/t/x", "9", 0);
  changes = feed.Changes(listed + 2, 0, 0.0);
  ASSERT_TRUE(changes);
  ASSERT_EQ(changes->size(), 1u);
  EXPECT_TRUE((*changes)[0].events.empty());
  EXPECT_EQ((*changes)[0].revision, outside);
}

TEST(PolledFeed, ACompactedHistoryOrAStoreGoneBackEndsTheView) {
  FakeClock clock;
  MemoryStore store(clock.fn());
  const int64_t first = *store.Put("/s/a", "1", 0);
  const int64_t second = *store.Put("/s/a", "2", 0);
  ASSERT_TRUE(store.Compact(second));
  PolledFeed feed(store, "/s/");
  auto changes = feed.Changes(first - 1, 0, 0.0);
  ASSERT_TRUE(changes);
  ASSERT_FALSE(changes->empty());
  EXPECT_TRUE(changes->back().compacted);
  store.LoseState();
  changes = feed.Changes(second, 0, 0.0);
  ASSERT_TRUE(changes);
  ASSERT_FALSE(changes->empty());
  EXPECT_TRUE(changes->back().compacted);
  SiteView view;
  view.Reset(RangeResult{{}, second});
  EXPECT_FALSE(view.Apply(changes->back()));
}

// A MemoryStore's Follow answers at once: the followed feed polls it every quiet_s, and its
// Changes waits (on its condition, not a sleep) for the revision asked.
TEST(FollowedFeed, WaitsForTheRevisionAskedAndStartsAgainFromAnotherPoint) {
  FakeClock clock;
  MemoryStore store(clock.fn());
  const int64_t listed = *store.Put("/s/a", "1", 0);
  FollowedFeed feed(store, "/s/", 0.002);
  ASSERT_TRUE(feed.Changes(listed, 0, 0.0));  // starts following
  const int64_t wrote = *store.Put("/s/b", "2", 0);
  SiteView view;
  view.Reset(RangeResult{{{"/s/a", "1", listed, listed, 1, 0}}, listed});
  while (view.revision() < wrote) {
    auto changes = feed.Changes(view.revision(), wrote, 30.0);
    ASSERT_TRUE(changes);
    for (const WatchResult& b : *changes) ASSERT_TRUE(view.Apply(b));
  }
  EXPECT_EQ(view.size(), 2u);
  EXPECT_EQ(view.revision(), wrote);
  // Listed again from the first revision: the feed hands the changes after it once more.
  SiteView again;
  again.Reset(RangeResult{{{"/s/a", "1", listed, listed, 1, 0}}, listed});
  while (again.revision() < wrote) {
    auto changes = feed.Changes(again.revision(), wrote, 30.0);
    ASSERT_TRUE(changes);
    for (const WatchResult& b : *changes) ASSERT_TRUE(again.Apply(b));
  }
  EXPECT_EQ(again.Snapshot().kvs.size(), 2u);
  EXPECT_GE(feed.streams(), 1u);
  feed.Stop();
}

// Every whole-prefix read counted.
class PrefixReadCounting final : public ForwardingStore {
 public:
  explicit PrefixReadCounting(Store& inner) : ForwardingStore(&inner) {}
  Result<RangeResult> Get(const std::string& key, bool prefix) override {
    if (prefix) ++prefix_reads;
    return ForwardingStore::Get(key, prefix);
  }
  int prefix_reads = 0;
};

// A feed that fails every call: its coordinator lists the site every period (the protocol
// before the view), the oracle for one planning on the view.
class FailingFeed final : public SiteFeed {
 public:
  Result<std::vector<WatchResult>> Changes(int64_t, int64_t, double) override {
    return Error::Io("no feed");
  }
};

// A feed that hands nothing after `hold_after` (a watch behind the store).
class HeldBackFeed final : public SiteFeed {
 public:
  HeldBackFeed(Store& store, std::string prefix) : inner_(store, std::move(prefix)) {}
  Result<std::vector<WatchResult>> Changes(int64_t after, int64_t until, double wait_s) override {
    auto r = inner_.Changes(after, until, wait_s);
    if (!r) return r;
    std::vector<WatchResult> out;
    for (const WatchResult& b : *r) {
      if (b.compacted) return std::vector<WatchResult>{b};
      WatchResult held{{}, std::min(b.revision, hold_after), false};
      for (const WatchEvent& e : b.events) {
        if (e.kv.mod_revision <= hold_after) held.events.push_back(e);
      }
      if (held.revision > after) out.push_back(std::move(held));
    }
    return out;
  }
  int64_t hold_after = std::numeric_limits<int64_t>::max();

 private:
  PolledFeed inner_;
};

CoordinatorConfig Config(const std::string& id) {
  CoordinatorConfig cc;
  cc.site = "s";
  cc.site_budget_w = 1000.0;
  cc.reserve_w = 50.0;
  cc.id = id;
  cc.forget_after_s = 5.0;
  return cc;
}

MemberConfig Job(const std::string& job, double floor_w, double nameplate_w) {
  MemberConfig mc;
  mc.site = "s";
  mc.job = job;
  mc.floor_w = floor_w;
  mc.nameplate_w = nameplate_w;
  mc.local_budget_w = floor_w;
  mc.standby_w = 0.0;
  return mc;
}

// Two identical sites stepped in lockstep: one leader plans on its view, the other lists the
// prefix every period. Demands change, a job leaves and is forgotten, the budget moves: the
// ledgers written are the same at every period, and the first lists its site once.
TEST(CoordinatorView, PlansExactlyAsAReadOfThePrefixEveryPeriodAndListsOnce) {
  FakeClock clock;
  MemoryStore viewed_store(clock.fn()), listed_store(clock.fn());
  PrefixReadCounting viewed(viewed_store);
  FailingFeed failing;
  Coordinator by_view(viewed, Config("v"), clock.fn(), Logger());
  Coordinator by_list(listed_store, Config("l"), clock.fn(), Logger(), &failing);
  std::vector<std::unique_ptr<SiteMember>> members;
  for (Store* store : {static_cast<Store*>(&viewed), static_cast<Store*>(&listed_store)}) {
    for (int j = 0; j < 4; ++j) {
      members.push_back(std::make_unique<SiteMember>(
          *store, Job("j" + std::to_string(j), 100.0 + 20.0 * j, 400.0 + 50.0 * j), clock.fn(),
          Logger()));
    }
  }
  for (int period = 0; period < 40; ++period) {
    clock.t += 1.0;
    for (size_t m = 0; m < members.size(); ++m) {
      const int j = static_cast<int>(m % 4);
      if (j == 3 && period == 20) members[m]->Leave();
      if (j == 3 && period >= 20) continue;
      // Demands move: each job's own cycle.
      members[m]->SetDemandW(period % (5 + j) < 2 ? 150.0 + 20.0 * j : -1.0);
      members[m]->Step();
      members[m]->Current();
    }
    if (period == 12) {
      ASSERT_TRUE(by_view.RequestSiteBudget(800.0));
      ASSERT_TRUE(by_list.RequestSiteBudget(800.0));
    }
    by_view.Step();
    by_list.Step();
    ASSERT_EQ(by_view.leading(), by_list.leading());
    if (!by_view.leading()) continue;
    ASSERT_TRUE(by_view.status().ledger && by_list.status().ledger) << period;
    Ledger a = *by_view.status().ledger, b = *by_list.status().ledger;
    a.request_id = b.request_id = "";
    EXPECT_EQ(ToJson(a), ToJson(b)) << "period " << period;
  }
  EXPECT_EQ(by_view.status().site_lists, 1u);
  EXPECT_EQ(viewed.prefix_reads, 1);
  EXPECT_GE(by_view.status().view_updates, 35u);
  EXPECT_GE(by_list.status().site_lists, 39u);
  EXPECT_EQ(by_view.status().ledger_writes, by_list.status().ledger_writes);
  EXPECT_GE(by_view.status().ledger_writes, 5u);
  EXPECT_FALSE(by_view.status().ledger->jobs.contains("j3"));  // forgotten on both
}

// A view behind the store never writes: the ledger's transaction compares the ledger's
// mod_revision. The watch stops handing changes just after someone else writes the ledger; a
// job forgotten by time alone makes the leader plan on its stale view: the write fails, the
// ledger stays the other writer's, and the next period lists the site and writes.
TEST(CoordinatorView, AViewBehindTheLedgerNeverWritesAndListsAgain) {
  FakeClock clock;
  MemoryStore store(clock.fn());
  HeldBackFeed feed(store, Keys("s").root);
  Coordinator leader(store, Config("v"), clock.fn(), Logger(), &feed);
  SiteMember stays(store, Job("a", 100.0, 400.0), clock.fn(), Logger());
  SiteMember leaves(store, Job("b", 100.0, 400.0), clock.fn(), Logger());
  for (int period = 0; period < 6; ++period) {
    clock.t += 1.0;
    stays.Step();
    leaves.Step();
    leader.Step();
  }
  ASSERT_TRUE(leader.leading());
  ASSERT_TRUE(leader.status().ledger->jobs.contains("b"));
  leaves.Leave();
  clock.t += 1.0;
  stays.Step();
  leader.Step();  // sees b gone (its absence counted from now)
  // Someone else writes the ledger (the same value: only its revision moves); the watch hands
  // nothing from here on.
  auto before = store.Get(Keys("s").ledger(), false);
  ASSERT_TRUE(before && before->kvs.size() == 1);
  const int64_t other = *store.Put(Keys("s").ledger(), before->kvs[0].value, 0);
  feed.hold_after = other - 1;
  const uint64_t conflicts = leader.status().write_conflicts;
  const uint64_t lists = leader.status().site_lists;
  for (int period = 0; period < 10 && leader.status().write_conflicts == conflicts; ++period) {
    clock.t += 1.0;
    stays.Step();
    leader.Step();
  }
  ASSERT_EQ(leader.status().write_conflicts, conflicts + 1) << "the stale view wrote";
  auto after = store.Get(Keys("s").ledger(), false);
  EXPECT_EQ(after->kvs[0].mod_revision, other);  // still the other writer's
  feed.hold_after = std::numeric_limits<int64_t>::max();
  clock.t += 1.0;
  stays.Step();
  leader.Step();
  EXPECT_EQ(leader.status().site_lists, lists + 1);
  after = store.Get(Keys("s").ledger(), false);
  EXPECT_GT(after->kvs[0].mod_revision, other);
  EXPECT_FALSE(leader.status().ledger->jobs.contains("b"));
}

}  // namespace
}  // namespace headroom::coord

namespace headroom::coord {
namespace {

int parses = 0;
Result<Ack> CountedAck(std::string_view text, std::string_view where) {
  ++parses;
  return AckFromJson(text, where);
}

// The leader parses a value once per revision of its key; keys gone are forgotten at the sweep.
TEST(ParsedValues, AValueIsParsedOncePerRevisionOfItsKey) {
  parses = 0;
  ParsedValues<Ack> cache;
  const Ack ack{"a", 1, 2, 3, 400.0};
  KeyValue kv{"/s/acks/a", ToJson(ack), 5, 5, 1, 3};
  ASSERT_TRUE(cache.Get(kv, CountedAck));
  EXPECT_DOUBLE_EQ(cache.Get(kv, CountedAck)->job_budget_w, 400.0);
  EXPECT_EQ(parses, 1);
  cache.Sweep();
  kv.mod_revision = 9;
  kv.value = ToJson(Ack{"a", 1, 3, 3, 300.0});
  EXPECT_DOUBLE_EQ(cache.Get(kv, CountedAck)->job_budget_w, 300.0);
  EXPECT_EQ(parses, 2);
  cache.Sweep();
  cache.Sweep();  // not asked for since: forgotten
  EXPECT_DOUBLE_EQ(cache.Get(kv, CountedAck)->job_budget_w, 300.0);
  EXPECT_EQ(parses, 3);
  kv.value = "{";  // the same revision: what was parsed stands
  EXPECT_TRUE(cache.Get(kv, CountedAck));
  cache.Clear();
  EXPECT_FALSE(cache.Get(kv, CountedAck));
  EXPECT_EQ(parses, 4);
}

}  // namespace
}  // namespace headroom::coord
