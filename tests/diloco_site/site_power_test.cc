// dist/site_power.h: the power model by hand, and a worker's member on its own thread against
// a coordinator over the in-memory store (one clock, advanced by the test): its grant becomes
// a duty cycle, and a guaranteed job taking every watt pauses it.
#include "diloco_site/site_power.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "coord/coordinator.h"
#include "coord/member.h"
#include "coord/memory_store.h"

namespace headroom::diloco {
namespace {

TEST(SitePower, TheModelByHand) {
  EXPECT_DOUBLE_EQ(WorkerPowerW(2, 0.5, 10.0), 10.0);  // 2 threads x 0.5 x 10 W
  EXPECT_DOUBLE_EQ(WorkerPowerW(4, 1.5, 10.0), 40.0);  // duty capped at 1
  EXPECT_DOUBLE_EQ(DutyForGrant(15.0, 2, 10.0), 0.75);
  EXPECT_DOUBLE_EQ(DutyForGrant(50.0, 2, 10.0), 1.0);
  EXPECT_DOUBLE_EQ(DutyForGrant(0.0, 2, 10.0), 0.0);
  EXPECT_DOUBLE_EQ(DutyForGrant(-3.0, 2, 10.0), 0.0);
  EXPECT_DOUBLE_EQ(DutyForGrant(5.0, 0, 10.0), 0.0);
}

// Advances the shared clock by `dt_s` per turn, steps the coordinator (and `also`), and asks
// the worker's duty until `want` holds; the member's own thread steps it meanwhile. Bounded.
bool Until(std::atomic<double>& t, coord::Coordinator& c, SitePower& p,
           const std::function<bool(double)>& want, const std::function<void()>& also = {}) {
  for (int turn = 0; turn < 4000; ++turn) {
    t.store(t.load() + 0.05);
    c.Step();
    if (also) also();
    if (want(p.GrantedDuty(2, 1.0))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the member's thread's turn
  }
  return false;
}

TEST(SitePower, TheGrantBecomesADutyAndAGuaranteedJobTakingEverythingPausesIt) {
  // (Names copied from strings: g++ 12's -Wrestrict misfires on a literal assigned at -O3.)
  const std::string site = "s", worker = "run.w", guaranteed = "guaranteed", id = "c";
  std::atomic<double> t{0.0};
  const auto now = [&t] { return t.load(); };
  coord::MemoryStore store(now);
  coord::CoordinatorConfig cc;
  cc.site = site;
  cc.site_budget_w = 15;
  cc.period_s = 0.05;
  cc.id = id;
  coord::Coordinator coordinator(store, cc, now, [](const std::string&) {});
  SitePowerConfig fc;
  fc.site = site;
  fc.job = worker;
  fc.threads = 2;  // 20 W of demand
  fc.watts_per_core = 10;
  fc.step_s = 0.001;
  SitePower power(store, fc, now, [](const std::string&) {});
  // Alone at the site: 15 W of the 20 W it wants, so duty 0.75.
  EXPECT_TRUE(Until(t, coordinator, power, [](double d) { return d == 0.75; }));
  EXPECT_DOUBLE_EQ(power.granted_w(), 15.0);
  // A guaranteed job wanting all 15 W: the worker's grant goes to 0 and it pauses.
  coord::MemberConfig g;
  g.site = site;
  g.job = guaranteed;
  g.nameplate_w = 15;
  g.floor_w = 5;
  g.local_budget_w = 5;
  coord::SiteMember job(store, g, now, [](const std::string&) {});
  const auto step_job = [&job] {
    job.Current();
    job.Step();
  };
  EXPECT_TRUE(Until(
      t, coordinator, power, [](double d) { return d == 0.0; }, step_job));
  EXPECT_TRUE(Until(
      t, coordinator, power,
      [&job](double) {
        const coord::Acting a = job.Current();
        return a.state == coord::Acting::State::kGranted && a.job_budget_w == 15.0;
      },
      step_job));
  // The job leaves: the watts come back to the worker.
  job.Leave();
  EXPECT_TRUE(Until(t, coordinator, power, [](double d) { return d == 0.75; }));
}

}  // namespace
}  // namespace headroom::diloco
