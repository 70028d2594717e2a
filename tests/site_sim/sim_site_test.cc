// SimSite (site_sim/sim_site.h): one simulated site built, ticked and measured, against values
// computed here: the clock's advance, the coordinator's periods, a job's grant under the site
// budget, what an opportunistic member is left, and the references without a site.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "coord/member.h"
#include "site_sim/sim_site.h"

namespace headroom::site_sim {
namespace {

constexpr double kIntervalS = 0.5;
constexpr double kPeriodS = 1.0;
constexpr int64_t kTicksPerPeriod = 2;  // kPeriodS / kIntervalS

// One 1-GPU job (a100-7b-tp1: 400 W nameplate) steered by pid, under `budget_w`.
SimSiteConfig OneJob(double budget_w, SimSiteMode mode = SimSiteMode::kSite) {
  SimSiteConfig c;
  c.name = "one-job";
  c.mode = mode;
  c.interval_s = kIntervalS;
  c.period_s = kPeriodS;
  c.jobs = {{"a100-7b-tp1", 1}};
  c.seed = 7;
  c.controller = "pid";
  c.site_budget_w = budget_w;
  return c;
}

std::unique_ptr<SimSite> Build(const SimSiteConfig& c) {
  auto site = SimSite::Build(c, nullptr, Logger());
  EXPECT_TRUE(site) << site.error().message();
  return site ? std::move(*site) : nullptr;
}

TEST(SimSite, EachTickAdvancesTheClockByOneIntervalAndTheCoordinatorStepsOncePerPeriod) {
  auto site = Build(OneJob(300.0));
  ASSERT_TRUE(site);
  ASSERT_EQ(site->job_count(), 1u);
  EXPECT_DOUBLE_EQ(site->nameplate_w(), 400.0);
  int periods = 0;
  for (int64_t k = 0; k <= 40; ++k) {
    site->BeginTick(k);
    EXPECT_DOUBLE_EQ(site->now_s(), static_cast<double>(k) * kIntervalS);
    if (k == 0) {
      EXPECT_EQ(site->jobs_energy_j(), 0.0);  // nothing drawn before the start
    }
    const bool stepped = site->EndTick(k);
    EXPECT_EQ(stepped, k % kTicksPerPeriod == 0) << k;
    periods += stepped ? 1 : 0;
  }
  EXPECT_EQ(periods, 21);  // k = 0, 2, ..., 40
  // The coordinator wrote the ledger (the job's admission) and at most once a period.
  EXPECT_GE(site->ledger_writes(), 1u);
  EXPECT_LE(site->ledger_writes(), static_cast<uint64_t>(periods));
  EXPECT_GT(site->coordinator_requests(), 0u);
  EXPECT_EQ(site->opportunistic_requests(), 0u);  // no opportunistic member
}

TEST(SimSite, OneJobUnderABudgetActsOnAGrantThatNeverExceedsItAndDrawsUnderIt) {
  constexpr double kBudgetW = 300.0;
  auto site = Build(OneJob(kBudgetW));
  ASSERT_TRUE(site);
  constexpr int64_t kTicks = 600;       // 300 s
  constexpr int64_t kWindowTicks = 60;  // 30 s
  double window_j = 0.0, total_j = 0.0;
  for (int64_t k = 0; k <= kTicks; ++k) {
    site->BeginTick(k);
    site->EndTick(k);
    EXPECT_LE(site->JobGrantW(0), kBudgetW + 1e-9) << "t " << site->now_s();
    if (k == 0) continue;
    window_j += site->jobs_energy_j();
    total_j += site->jobs_energy_j();
    if (k % kWindowTicks == 0) {
      // The mean power of each 30 s window, from the ticks' energies.
      EXPECT_LE(window_j / (kWindowTicks * kIntervalS), kBudgetW) << "window ending " << k;
      window_j = 0.0;
    }
  }
  // The ledger grants the one job the whole budget (its demand is above it), and the job result
  // adds up what the ticks measured.
  ASSERT_TRUE(site->LedgerGrantW("a100-7b-tp1-1"));
  EXPECT_DOUBLE_EQ(*site->LedgerGrantW("a100-7b-tp1-1"), kBudgetW);
  EXPECT_EQ(*site->LedgerGrantW("no-such-job"), 0.0);
  const FleetSimJobResult r = site->JobResult(0, kTicks * kIntervalS);
  EXPECT_EQ(r.job, "a100-7b-tp1-1");
  EXPECT_EQ(r.controller, "pid");
  EXPECT_TRUE(r.admitted);
  EXPECT_NEAR(r.energy_j, total_j, 1e-6 * total_j);
  EXPECT_GT(r.tokens, 0.0);
  EXPECT_LE(r.mean_grant_w, kBudgetW);
  site->Close();
}

TEST(SimSite, WithoutASiteEachJobActsOnItsOwnBudgetAndNothingIsCoordinated) {
  auto own = Build(OneJob(300.0, SimSiteMode::kOwnBudgets));
  auto free = Build(OneJob(300.0, SimSiteMode::kUncontrolled));
  ASSERT_TRUE(own && free);
  for (int64_t k = 0; k <= 20; ++k) {
    own->BeginTick(k);
    free->BeginTick(k);
    EXPECT_FALSE(own->EndTick(k));
    EXPECT_FALSE(free->EndTick(k));
  }
  // a100-7b-tp1's own budget and its nameplate, one GPU.
  EXPECT_DOUBLE_EQ(own->JobGrantW(0), 314.6);
  EXPECT_DOUBLE_EQ(free->JobGrantW(0), 400.0);
  EXPECT_EQ(free->JobResult(0, 10.0).controller, "uncontrolled");
  EXPECT_FALSE(own->LedgerGrantW("a100-7b-tp1-1"));
  EXPECT_EQ(own->ledger_writes(), 0u);
  EXPECT_EQ(own->reassignments(), 0u);
  EXPECT_EQ(own->coordinator_requests(), 0u);
}

TEST(SimSite, AnOpportunisticMemberIsGrantedWhatTheTracedJobsLeave) {
  SimSiteConfig c;
  c.name = "traced";
  c.interval_s = 1.0;
  c.period_s = 1.0;
  c.site_budget_w = 1000.0;
  c.trace_jobs_w = [](double) { return 600.0; };
  auto site = Build(c);
  ASSERT_TRUE(site);
  EXPECT_EQ(site->job_count(), 0u);
  auto worker = site->JoinOpportunistic("worker", 800.0);
  double grant_w = 0.0;
  for (int64_t k = 0; k <= 10; ++k) {
    site->BeginTick(k);
    grant_w = StepOpportunistic(*worker);
    worker->Observe(site->now_s(), grant_w, grant_w > 0.0 ? "train" : "idle", 0.0);
    site->EndTick(k);
  }
  // 1000 W less the traced 600 W: 400 W for the worker, who asked for 800.
  EXPECT_DOUBLE_EQ(grant_w, 400.0);
  EXPECT_DOUBLE_EQ(*site->LedgerGrantW("worker"), 400.0);
  EXPECT_GT(site->opportunistic_requests(), 0u);
  // Nothing changes from here (the trace constant, the worker drawing its grant): the ledger is
  // written on a change only, so 90 more periods write it no more.
  const uint64_t writes = site->ledger_writes();
  EXPECT_GE(writes, 1u);
  for (int64_t k = 11; k <= 100; ++k) {
    site->BeginTick(k);
    grant_w = StepOpportunistic(*worker);
    worker->Observe(site->now_s(), grant_w, "train", 0.0);
    EXPECT_TRUE(site->EndTick(k));  // a period every tick
  }
  EXPECT_DOUBLE_EQ(grant_w, 400.0);
  EXPECT_EQ(site->ledger_writes(), writes);
  worker->Leave();
  site->Close();
}

TEST(SimSite, TheSameConfigAndSeedGiveTheSameRun) {
  SimSiteConfig c = OneJob(300.0);
  c.random_offsets = true;
  auto a = Build(c);
  auto b = Build(c);
  ASSERT_TRUE(a && b);
  for (int64_t k = 0; k <= 120; ++k) {
    a->BeginTick(k);
    b->BeginTick(k);
    EXPECT_EQ(a->jobs_energy_j(), b->jobs_energy_j()) << k;
    a->EndTick(k);
    b->EndTick(k);
  }
  EXPECT_EQ(a->JobResult(0, 60.0).tokens, b->JobResult(0, 60.0).tokens);
  EXPECT_EQ(a->JobHolds(0), b->JobHolds(0));
  EXPECT_EQ(a->ledger_writes(), b->ledger_writes());
}

TEST(SimSite, AScenarioThatCannotRunIsAnErrorNamingIt) {
  SimSiteConfig c = OneJob(300.0);
  c.jobs = {{"no-such-scenario", 1}};
  auto site = SimSite::Build(c, nullptr, Logger());
  ASSERT_FALSE(site);
  EXPECT_NE(site.error().message().find("no-such-scenario"), std::string::npos)
      << site.error().message();
}

}  // namespace
}  // namespace headroom::site_sim
