// The site member (coord/member.h): what it publishes (demand by phase, a value curve, the step
// timeline, holds) and when (on change), its grant's watch, and its threads -- the runner's, the
// watch's, the session's and the lease keeper's (under TSan in `make test-tsan`).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "coord/coord_test_util.h"
#include "coord/coordinator.h"
#include "coord/counting_store.h"
#include "coord/layout.h"
#include "coord/lease_keeper.h"
#include "coord/member.h"
#include "coord/member_session.h"
#include "coord/memory_store.h"

// g++ 12 at -O3 warns wrongly on the short strings this file assigns (-Wrestrict, GCC PR
// 105651): where the warning lands moves with whatever else the unity build puts in the file,
// so it is off for the whole of it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wrestrict"

namespace headroom::coord {
namespace {

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

// What the coordinator plans on, field by field (docs/SITE.md, "Members write on change"): a
// change of any of it is put; what only describes the job rides along with the next put.
TEST(MemberWritesOnChange, WhatTheCoordinatorPlansOnIsWhatCounts) {
  Member put = M("j", 200, 800, 7);
  put.phase = "train";
  put.budget_w = 500;
  put.power_w = 400;
  put.has_timeline = true;
  put.timeline.step = 3;
  const MemberConfig plain;
  MemberConfig by_phase;
  by_phase.phase_demand = true;
  MemberConfig lends;
  lends.publish_phase_changes = true;
  const auto changed = [&](const std::function<void(Member&)>& edit, const MemberConfig& c) {
    Member now = put;
    edit(now);
    return PlanInputsChanged(put, now, c);
  };
  EXPECT_FALSE(changed([](Member&) {}, plain));
  for (const auto& edit : std::vector<std::function<void(Member&)>>{
           [](Member& m) { m.floor_w = 250; }, [](Member& m) { m.demand_w = 700; },
           [](Member& m) { m.job_class = JobClass::kOpportunistic; },
           [](Member& m) { m.standby_w = 150; }, [](Member& m) { m.update_w = 900; },
           [](Member& m) { m.nameplate_w = 900; }, [](Member& m) { m.gpus = 2; },
           [](Member& m) { m.slurm_job = "42"; }, [](Member& m) { m.holder = "h"; },
           [](Member& m) { m.lease = 8; }, [](Member& m) { m.phase = "idle"; },  // held now
           [](Member& m) { m.timeline.step = 4; },                               // a step begun
           [](Member& m) { m.timeline.in_rollout = true; },                      // a rollout begun
           [](Member& m) { m.timeline.held_left_s = 5; },                        // a hold begun
           [](Member& m) { m.has_timeline = false; },                            // stopped
           [](Member& m) {
             m.value_curve = {{200, 1}};
           }}) {  // a curve first built
    EXPECT_TRUE(changed(edit, plain));
  }
  // Measurements, the timeline's moving parts, a phase within the step: nothing to plan on.
  for (const auto& edit : std::vector<std::function<void(Member&)>>{
           [](Member& m) { m.demand_w += 0.4; }, [](Member& m) { m.budget_w = 450; },
           [](Member& m) { m.power_w = 650; }, [](Member& m) { m.value_tokens_per_j = 3; },
           [](Member& m) { m.tokens_per_s = 99; }, [](Member& m) { m.phase = "logprobs"; },
           [](Member& m) { m.timeline.phase_elapsed_s = 30; },
           [](Member& m) { m.timeline.rollout_s = 40; }}) {
    EXPECT_FALSE(changed(edit, plain));
  }
  // With the phase published, its every change; a site that lends reads the power too.
  EXPECT_TRUE(changed([](Member& m) { m.phase = "logprobs"; }, by_phase));
  EXPECT_FALSE(changed([](Member& m) { m.power_w = 650; }, by_phase));
  EXPECT_TRUE(changed([](Member& m) { m.power_w = 420; }, lends));   // +5 %
  EXPECT_FALSE(changed([](Member& m) { m.power_w = 405; }, lends));  // +1.25 %
  // A curve's later changes ride along.
  put.value_curve = {{200, 1}, {800, 9}};
  EXPECT_FALSE(changed([](Member& m) { m.value_curve = {{200, 1}, {800, 8}}; }, plain));
}

// A member on a fake clock over the in-memory store, stepped as fleet-sim steps one (every
// 0.5 s: observe, step, serve), with its member key's puts counted by the member and by the
// key's revision.
struct SteppedMember {
  explicit SteppedMember(const MemberConfig& mc) : member(store, Named(mc), clock.fn(), Logger()) {}
  static MemberConfig Named(MemberConfig mc) {
    mc.site = "s";
    mc.job = "j";
    return mc;
  }
  // Every 0.5 s up to `until_s`.
  void RunTo(double until_s) {
    while (clock.t + 0.5 <= until_s + 1e-9) {
      clock.t += 0.5;
      member.Observe(clock.t, power_w, phase, 10.0);
      member.Step();
      (void)member.Current();
    }
  }
  Member Published() {
    auto r = store.Get(Keys("s").member("j"), false);
    EXPECT_TRUE(r && r->kvs.size() == 1);
    return *MemberFromJson(r->kvs[0].value, "member");
  }
  int64_t ModRevision() {
    auto r = store.Get(Keys("s").member("j"), false);
    return r && r->kvs.size() == 1 ? r->kvs[0].mod_revision : 0;
  }
  uint64_t puts() const { return member.status().puts; }

  FakeClock clock;
  MemoryStore store{clock.fn()};
  SiteMember member;
  double power_w = 300.0;
  std::string phase = "train";
};

MemberConfig EightHundredWatts() {
  MemberConfig mc;
  mc.nameplate_w = 800;
  mc.floor_w = 200;
  return mc;
}

TEST(MemberWritesOnChange, ASteadyMemberIsPutOnlyAtTheRefresh) {
  SteppedMember s(EightHundredWatts());
  // Registered at 0.5 s (a put); the standby served since (budget_w 0 -> 200 W) rides along.
  // Nothing changes after.
  s.RunTo(5);
  ASSERT_TRUE(s.member.status().registered);
  EXPECT_EQ(s.puts(), 1u);
  const int64_t revision = s.ModRevision();
  s.power_w = 350;  // a measurement: rides along
  s.RunTo(60);
  EXPECT_EQ(s.puts(), 1u);
  EXPECT_EQ(s.ModRevision(), revision);
  EXPECT_DOUBLE_EQ(s.Published().power_w, 300);
  // 60 s after the last put: the refresh, with what changed meanwhile.
  s.RunTo(60.5);
  EXPECT_EQ(s.puts(), 2u);
  EXPECT_GT(s.ModRevision(), revision);
  EXPECT_DOUBLE_EQ(s.Published().power_w, 350);
  EXPECT_DOUBLE_EQ(s.Published().budget_w, 200);
  s.RunTo(120);
  EXPECT_EQ(s.puts(), 2u);
}

TEST(MemberWritesOnChange, ADemandChangeIsPutAtTheNextCheck) {
  SteppedMember s(EightHundredWatts());
  s.RunTo(5);
  const uint64_t puts = s.puts();
  s.member.SetDemandW(500);
  s.RunTo(5.5);
  EXPECT_EQ(s.puts(), puts + 1);
  EXPECT_DOUBLE_EQ(s.Published().demand_w, 500);
  s.member.SetDemandW(500.3);  // within the tolerance: the same demand
  s.RunTo(10);
  EXPECT_EQ(s.puts(), puts + 1);
  s.member.SetDemandW(-1);  // the configured rule again: the nameplate
  s.RunTo(10.5);
  EXPECT_EQ(s.puts(), puts + 2);
  EXPECT_DOUBLE_EQ(s.Published().demand_w, 800);
}

// The grant acted on is acknowledged (acks/<job>: what the coordinator reads), and rides along
// in the member key: a budget change costs one write per member, not two.
TEST(MemberWritesOnChange, AGrantActedOnIsAcknowledgedAndRidesAlong) {
  SteppedMember s(EightHundredWatts());
  s.RunTo(5);
  const uint64_t puts = s.puts();
  Grant g;
  g.job = "j";
  g.term = 1;
  g.seq = 1;
  g.lease = s.member.status().lease;
  g.job_budget_w = 600;
  ASSERT_TRUE(s.store.Put(Keys("s").grant("j"), ToJson(g), 0));
  // Read and served at 5.5 s, acknowledged at the step after; the member key is not put.
  s.RunTo(6.5);
  EXPECT_EQ(s.member.Current().state, Acting::State::kGranted);
  EXPECT_EQ(s.puts(), puts);
  EXPECT_GE(s.member.status().acks, 1u);
  auto ack = s.store.Get(Keys("s").ack("j"), false);
  ASSERT_TRUE(ack && ack->kvs.size() == 1);
  auto a = AckFromJson(ack->kvs[0].value, ack->kvs[0].key);
  ASSERT_TRUE(a);
  EXPECT_DOUBLE_EQ(a->job_budget_w, 600);
  // At the refresh (60 s after the last put) it rides along.
  s.RunTo(70);
  EXPECT_EQ(s.puts(), puts + 1);
  EXPECT_DOUBLE_EQ(s.Published().budget_w, 600);
}

TEST(MemberWritesOnChange, APhaseChangeWithDemandByPhaseIsPutAtOnce) {
  MemberConfig mc = EightHundredWatts();
  mc.phase_demand = true;
  SteppedMember s(mc);
  s.RunTo(4.5);
  const uint64_t puts = s.puts();
  EXPECT_DOUBLE_EQ(s.Published().demand_w, 200);  // outside rollout: the floor
  s.phase = "rollout";
  s.RunTo(5);  // checked at 4.5 s, next at 5.5 s: the change is put at once all the same
  EXPECT_EQ(s.puts(), puts + 1);
  EXPECT_DOUBLE_EQ(s.Published().demand_w, 800);
  s.RunTo(20);
  EXPECT_EQ(s.puts(), puts + 1);
}

// Without demand by phase, a phase within the step changes nothing planned; holding does (what
// a job not admitted is charged), and so do the step timeline's events.
TEST(MemberWritesOnChange, TheStepTimelinesEventsArePutAndItsMovingPartsRideAlong) {
  SteppedMember s(EightHundredWatts());
  s.RunTo(5);
  uint64_t puts = s.puts();
  s.phase = "logprobs";
  s.RunTo(8);
  EXPECT_EQ(s.puts(), puts);
  s.phase = "idle";
  s.RunTo(9);
  EXPECT_EQ(s.puts(), ++puts);
  EXPECT_EQ(s.Published().phase, "idle");
  // A rollout 9.5-20 s (no longer held), then the rest from 20.5 s (the timeline arrives: a
  // rollout and a rest both seen), a rollout from 30.5 s, the rest from 40.5 s: each put at
  // once, and nothing in between.
  s.phase = "rollout";
  s.RunTo(20);
  EXPECT_EQ(s.puts(), ++puts);
  EXPECT_FALSE(s.Published().has_timeline);
  for (const char* phase : {"train", "rollout", "train"}) {
    s.phase = phase;
    s.RunTo(s.clock.t + 1);
    EXPECT_EQ(s.puts(), ++puts) << phase << " at " << s.clock.t;
    ASSERT_TRUE(s.Published().has_timeline);
    EXPECT_EQ(s.Published().timeline.in_rollout, std::string(phase) == "rollout");
    s.power_w += 100;  // within the part: rides along
    s.RunTo(s.clock.t + 9);
    EXPECT_EQ(s.puts(), puts) << phase << " at " << s.clock.t;
  }
}

TEST(MemberWritesOnChange, AMemberRegisteredAgainIsPutAtOnce) {
  SteppedMember s(EightHundredWatts());
  s.RunTo(5);
  const uint64_t puts = s.puts();
  const LeaseId lease = s.member.status().lease;
  ASSERT_TRUE(s.store.LeaseRevoke(lease).ok());
  EXPECT_EQ(s.ModRevision(), 0);  // the key gone with its lease
  // The renewal finds the lease gone; the next step registers again, with its put.
  while (s.member.status().leases_lost == 0 && s.clock.t < 10) s.RunTo(s.clock.t + 0.5);
  ASSERT_EQ(s.member.status().leases_lost, 1u);
  s.RunTo(s.clock.t + 0.5);
  ASSERT_TRUE(s.member.status().registered);
  EXPECT_EQ(s.puts(), puts + 1);
  EXPECT_GT(s.ModRevision(), 0);
  EXPECT_EQ(s.Published().lease, s.member.status().lease);
  EXPECT_NE(s.Published().lease, lease);
}

// A registration applied whose answer was lost (an unknown outcome): the next try finds the name
// taken on its own lease, and takes it as its own -- not as a duplicate of itself, counted at
// standby beside its own admission for as long as its lease lives.
TEST(Member, ARegistrationWhoseAnswerWasLostIsItsOwn) {
  SteppedMember s(EightHundredWatts());
  s.store.FailNextWriteAfterApply();
  s.RunTo(0.5);
  EXPECT_FALSE(s.member.status().registered);
  EXPECT_GT(s.ModRevision(), 0);  // applied
  s.RunTo(1);
  const MemberStatus st = s.member.status();
  ASSERT_TRUE(st.registered) << st.refused;
  EXPECT_FALSE(st.duplicate);
  EXPECT_EQ(st.puts, 1u);
  EXPECT_EQ(s.Published().lease, st.lease);
  auto members = s.store.Get(Keys("s").members(), true);
  ASSERT_TRUE(members);
  EXPECT_EQ(members->kvs.size(), 1u);  // no duplicate's key left on its lease
}

// An agent's threads on one member: a coordinator and a member on a store whose clock the test
// advances from the thread that steps them, and a runner thread that asks the member what to
// act on, as the agent's runner does (under TSan in `make test-tsan`).
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

TEST(MemberThreads, StepAndCurrentRunConcurrently) {
  ThreadedMember t(0.0);
  t.Run();
  t.done.store(true);
  t.runner.join();
  EXPECT_EQ(t.member->Current().state, Acting::State::kGranted);
  EXPECT_DOUBLE_EQ(t.member->Current().job_budget_w, 800.0);
}

// A member whose grant is watched: a grant written reaches Current() through the watch, with
// no read of the grant key in between (docs/SITE.md, "Members watch their grant").
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

#pragma GCC diagnostic pop
