// The simulated clock the in-process distributed tests run on (support/sim_scheduler.h): one
// participant at a time, time that jumps when all are blocked, waits with deadlines, kills,
// stops, and a deadlock said rather than hung.
#include "support/sim_scheduler.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace headroom::testing {
namespace {

TEST(SimScheduler, SleepsInterleaveByTimeAndCostNoRealTime) {
  SimScheduler sim;
  std::vector<std::string> order;  // touched by the baton's holder only
  sim.Spawn("a", [&] {
    for (int i = 0; i < 3; ++i) {
      order.push_back(fmt::format("a{}@{:.1f}", i, sim.now_s()));
      sim.Sleep(100.0);
    }
  });
  sim.Spawn("b", [&] {
    sim.Sleep(50.0);
    for (int i = 0; i < 2; ++i) {
      order.push_back(fmt::format("b{}@{:.1f}", i, sim.now_s()));
      sim.Sleep(100.0);
    }
  });
  ASSERT_TRUE(sim.Run(1e6).ok());
  EXPECT_EQ(order,
            (std::vector<std::string>{"a0@0.0", "b0@50.0", "a1@100.0", "b1@150.0", "a2@200.0"}));
  EXPECT_DOUBLE_EQ(sim.now_s(), 300.0);  // a's last sleep
}

TEST(SimScheduler, AWaitWakesOnTheConditionOrAtItsDeadline) {
  SimScheduler sim;
  Mutex mu;
  std::condition_variable_any cv;
  bool flag = false;
  double woke_on_flag = -1, timed_out_at = -1;
  bool first = false, second = true;
  sim.Spawn("waiter", [&] {
    MutexLock lock(mu);
    first = sim.waiter().WaitUntil(cv, mu, 10.0, [&] { return flag; });
    woke_on_flag = sim.now_s();
    second = sim.waiter().WaitUntil(cv, mu, 20.0, [] { return false; });
    timed_out_at = sim.now_s();
  });
  sim.Spawn("setter", [&] {
    sim.Sleep(3.0);
    MutexLock lock(mu);
    flag = true;
    cv.notify_all();
  });
  ASSERT_TRUE(sim.Run(100).ok());
  EXPECT_TRUE(first);
  EXPECT_DOUBLE_EQ(woke_on_flag, 3.0);
  EXPECT_FALSE(second);
  EXPECT_DOUBLE_EQ(timed_out_at, 20.0);
}

TEST(SimScheduler, AKilledParticipantUnwindsAtItsNextBlockAndTheOthersGoOn) {
  SimScheduler sim;
  int steps = 0;
  bool unwound = false;
  struct Guard {
    bool& flag;
    ~Guard() { flag = true; }
  };
  sim.Spawn("victim", [&] {
    Guard g{unwound};
    while (true) {
      ++steps;
      sim.Sleep(1.0);
    }
  });
  sim.Spawn("killer", [&] {
    sim.Sleep(4.5);
    sim.Kill("victim");
    EXPECT_FALSE(sim.Ended("victim"));
    sim.Sleep(1.0);
    EXPECT_TRUE(sim.Ended("victim"));
  });
  ASSERT_TRUE(sim.Run(100).ok());
  EXPECT_EQ(steps, 5);  // at 0, 1, 2, 3 and 4 s
  EXPECT_TRUE(unwound);
}

TEST(SimScheduler, AStoppedParticipantIsNotScheduledUntilItsStopEnds) {
  SimScheduler sim;
  std::vector<double> ticks;
  sim.Spawn("ticker", [&] {
    for (int i = 0; i < 4; ++i) {
      ticks.push_back(sim.now_s());
      sim.Sleep(1.0);
    }
  });
  sim.Spawn("stopper", [&] {
    sim.Sleep(1.5);
    sim.Stop("ticker", 5.0);  // until 6.5 s
  });
  ASSERT_TRUE(sim.Run(100).ok());
  EXPECT_EQ(ticks, (std::vector<double>{0.0, 1.0, 6.5, 7.5}));
}

TEST(SimScheduler, ADeadlockIsAnErrorNamingWhoWaitsAndTheThreadsAreReleased) {
  SimScheduler sim;
  Mutex mu;
  std::condition_variable_any cv;
  sim.Spawn("stuck", [&] {
    MutexLock lock(mu);
    sim.waiter().WaitUntil(cv, mu, std::numeric_limits<double>::infinity(), [] { return false; });
  });
  const Status s = sim.Run(100);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("deadlock"), std::string::npos) << s.error().message();
  EXPECT_NE(s.error().message().find("stuck waiting forever"), std::string::npos)
      << s.error().message();
}

TEST(SimScheduler, PastItsBoundTheRunFails) {
  SimScheduler sim;
  sim.Spawn("long", [&] { sim.Sleep(1000.0); });
  const Status s = sim.Run(10.0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("would pass 10.000 s"), std::string::npos)
      << s.error().message();
}

TEST(SimScheduler, ParticipantsSpawnedByAParticipantJoinTheRun) {
  SimScheduler sim;
  std::vector<std::string> seen;
  sim.Spawn("parent", [&] {
    sim.Sleep(2.0);
    sim.Spawn("child", [&] {
      seen.push_back(fmt::format("child@{:.1f}", sim.now_s()));
      sim.Sleep(1.0);
      seen.push_back(fmt::format("child@{:.1f}", sim.now_s()));
    });
    seen.push_back(fmt::format("parent@{:.1f}", sim.now_s()));
  });
  ASSERT_TRUE(sim.Run(100).ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"parent@2.0", "child@2.0", "child@3.0"}));
}

}  // namespace
}  // namespace headroom::testing
