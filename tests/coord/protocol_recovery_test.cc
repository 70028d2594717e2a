// The protocol over the in-memory store (Site, coord_test_util.h) through restarts and lost
// state: a taken job name, restarted agents and their duplicates, the store losing its state,
// and a deleted ledger rebuilt.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "coord/coord_test_util.h"
#include "coord/coordinator.h"
#include "coord/forwarding_store.h"
#include "coord/layout.h"
#include "coord/member.h"

namespace headroom::coord {
namespace {

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

// A store that loses its state under the ledger's transaction and answers it with an unknown
// outcome (etcd restored from an older snapshot while the write was in flight).
class LosesStateUnderTheLedgerWrite final : public ForwardingStore {
 public:
  explicit LosesStateUnderTheLedgerWrite(MemoryStore& memory)
      : ForwardingStore(&memory), memory_(memory) {}
  bool armed = false;
  Result<TxnResult> Txn(const TxnRequest& request) override {
    if (!armed) return ForwardingStore::Txn(request);
    armed = false;
    memory_.LoseState();
    return Error::OutcomeUnknown("injected: the state lost under the write");
  }

 private:
  MemoryStore& memory_;
};

// The read-back that resolves an unknown outcome is a read like any other: a revision lower than
// one seen says the store's state was lost, in that period, not the next.
TEST(Protocol, AnUnknownOutcomeReadBackFromALostStoreSeesTheLossAtOnce) {
  FakeClock clock;
  MemoryStore memory(clock.fn());
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(memory.Put("/other", "x", 0));  // revisions to lose
  LosesStateUnderTheLedgerWrite store(memory);
  CoordinatorConfig cc;
  cc.site = "s";
  cc.site_budget_w = 1000;
  cc.id = "c0";
  Coordinator coordinator(store, cc, clock.fn(), [](auto&) {});
  for (int i = 0; i < 3; ++i, clock.t += 1.0) coordinator.Step();
  ASSERT_TRUE(coordinator.leading());
  ASSERT_GE(coordinator.status().ledger_writes, 1u);
  ASSERT_TRUE(coordinator.RequestSiteBudget(900));  // the next period writes a ledger
  store.armed = true;
  coordinator.Step();
  EXPECT_FALSE(store.armed);
  EXPECT_EQ(coordinator.status().unknown_outcomes, 1u);
  EXPECT_EQ(coordinator.status().store_resets, 1u);
}

}  // namespace
}  // namespace headroom::coord
