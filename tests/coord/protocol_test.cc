// The protocol end to end over the in-memory store (Site, coord_test_util.h): grants and
// acknowledgements, failover, fencing, budget changes, opportunistic members, malformed values,
// unknown outcomes and random faults, with an auditor that sees only what each member acts on;
// the leader's compaction and its warning about the reserve. Restarts, duplicates and lost state
// are in protocol_recovery_test.cc.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "coord/coord_test_util.h"
#include "coord/coordinator.h"
#include "coord/member.h"
#include "coord/memory_store.h"
#include "coord_server/coordinator_server.h"

namespace headroom::coord {
namespace {

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

  const nlohmann::json status =
      nlohmann::json::parse(coord_server::CoordinatorStatusJson(c.status(), cc));
  EXPECT_DOUBLE_EQ(status["largest_arrival_standby_w"].get<double>(), 332);
  EXPECT_DOUBLE_EQ(status["reserve_short_w"].get<double>(), 232);
  EXPECT_NE(coord_server::CoordinatorMetricsText(c.status())
                .find("\nheadroom_site_reserve_short_watts 232\n"),
            std::string::npos)
      << coord_server::CoordinatorMetricsText(c.status());

  // The operator raises the reserve to 400 W: in force once the grants fit under 3000 - 400.
  ASSERT_TRUE(c.RequestTarget(std::nullopt, 400));
  for (int i = 0; i < 20 && c.status().ledger->reserve_w != 400; ++i) period();
  ASSERT_DOUBLE_EQ(c.status().ledger->reserve_w, 400);
  EXPECT_DOUBLE_EQ(ReserveShortW(c.status()), 0);
  EXPECT_NE(coord_server::CoordinatorMetricsText(c.status())
                .find("\nheadroom_site_reserve_short_watts 0\n"),
            std::string::npos);
  // A follower (no ledger of its own): null.
  CoordinatorStatus follower;
  follower.role = "follower";
  const nlohmann::json f = nlohmann::json::parse(coord_server::CoordinatorStatusJson(follower, cc));
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

}  // namespace
}  // namespace headroom::coord
