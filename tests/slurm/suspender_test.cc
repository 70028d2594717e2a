// Suspending and resuming opportunistic members' jobs through Slurm (slurm/suspender.h): job
// ids, the fake scheduler's rules and the suspender's decisions on a leader's status.
#include "slurm/suspender.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>

#include "coord/coord_test_util.h"
#include "coord/coordinator.h"
#include "coord/layout.h"
#include "slurm/batch_scheduler.h"

namespace headroom::slurm {
namespace {

using coord::CoordinatorStatus;
using coord::Fresh;
using coord::IsSlurmJobId;
using coord::LedgerJob;
using coord::M;
using coord::Member;
using coord::MemberFromJson;
using coord::Opportunistic;
using coord::ToJson;

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

}  // namespace
}  // namespace headroom::slurm
