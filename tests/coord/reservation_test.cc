// The reservation planner (coord/reservation.h) on scripted timelines, answers computed by hand.
#include "coord/reservation.h"

#include <gtest/gtest.h>

namespace headroom::coord {
namespace {

// Rollout 10 s, then the update 10 s; floor 100 W, the update 500 W unconstrained.
ReservationJob UpdateJob(bool in_rollout, double elapsed_s) {
  ReservationJob j;
  j.timeline.in_rollout = in_rollout;
  j.timeline.phase_elapsed_s = elapsed_s;
  j.timeline.rollout_s = 10;
  j.timeline.rest_s = 10;
  j.timeline.rollout_w = 300;
  j.timeline.rest_w = 350;  // measured under a limit: the member's update_w is what counts
  j.timeline.held_w = 80;
  j.timeline.step = 7;
  j.floor_w = 100;
  j.update_w = 500;
  return j;
}

ReservationOptions ReserveOptions(double budget_w) {
  ReservationOptions o;
  o.budget_w = budget_w;
  o.lead_s = 3;
  o.horizon_s = 120;
  o.dt_s = 1;
  o.max_hold_s = 60;
  o.hold_step_s = 5;
  return o;
}

TEST(PlanReservations, TwoUpdatesTheSiteCannotHoldAtOnceTheNextOneIsHeldPastTheOther) {
  // Both at the start of their rollouts: updates at [10, 20) s, reserved from 7 s. Floors 200 W
  // and one update's 400 W above its floor fit in 600 W; two do not. a's is placed (first by
  // name at the same start), b's in progress cannot move (a hold applies at the next step):
  // unreserved. Their next steps start at 20 s, updates at [30, 40) s reserved from 27 s: a's
  // fits with no hold; b's must start its reservation at 40 s or later: 27 + h >= 40, h = 15 s
  // (holds in 5 s steps).
  const std::map<std::string, ReservationJob> jobs = {{"a", UpdateJob(true, 0)},
                                                      {"b", UpdateJob(true, 0)}};
  const ReservationPlan p = PlanReservations(jobs, ReserveOptions(600));
  EXPECT_DOUBLE_EQ(p.hold_s.at("a"), 0);
  EXPECT_DOUBLE_EQ(p.hold_s.at("b"), 15);
  EXPECT_EQ(p.unreserved, 1);
  EXPECT_TRUE(p.reserved_w.empty());  // nothing begins before 7 s
  ASSERT_EQ(p.windows.size(), 3u);
  EXPECT_EQ(p.windows[0].job, "a");
  EXPECT_DOUBLE_EQ(p.windows[0].from_s, 7);
  EXPECT_DOUBLE_EQ(p.windows[0].to_s, 20);
  EXPECT_FALSE(p.windows[0].next);
  EXPECT_EQ(p.windows[2].job, "b");
  EXPECT_DOUBLE_EQ(p.windows[2].from_s, 42);
  EXPECT_DOUBLE_EQ(p.windows[2].to_s, 55);
  EXPECT_TRUE(p.windows[2].next);
}

TEST(PlanReservations, WhenBothFitNoOneIsHeld) {
  const std::map<std::string, ReservationJob> jobs = {{"a", UpdateJob(true, 0)},
                                                      {"b", UpdateJob(true, 0)}};
  const ReservationPlan p = PlanReservations(jobs, ReserveOptions(1000));  // 200 + 2 x 400
  EXPECT_DOUBLE_EQ(p.hold_s.at("a"), 0);
  EXPECT_DOUBLE_EQ(p.hold_s.at("b"), 0);
  EXPECT_EQ(p.unreserved, 0);
  EXPECT_EQ(p.windows.size(), 4u);
}

TEST(PlanReservations, AnUpdateInProgressOrWithinTheLeadIsReservedNow) {
  // a 2 s into its update (in force now, to 8 s); b 8 s into its rollout: its update at 2 s,
  // its reservation from -1 s -- now too, but it does not fit beside a's.
  std::map<std::string, ReservationJob> jobs = {{"a", UpdateJob(false, 2)},
                                                {"b", UpdateJob(true, 8)}};
  ReservationPlan p = PlanReservations(jobs, ReserveOptions(600));
  ASSERT_EQ(p.reserved_w.size(), 1u);
  EXPECT_DOUBLE_EQ(p.reserved_w.at("a"), 500);
  // With room for both, both now.
  p = PlanReservations(jobs, ReserveOptions(1000));
  EXPECT_EQ(p.reserved_w.size(), 2u);
  EXPECT_DOUBLE_EQ(p.reserved_w.at("b"), 500);
}

TEST(PlanReservations, NoHoldFitsNoneIsTakenAndTheUpdatesRunUnreserved) {
  // 500 W: the floors and one update need 600 W.
  const std::map<std::string, ReservationJob> jobs = {{"a", UpdateJob(true, 0)},
                                                      {"b", UpdateJob(true, 0)}};
  const ReservationPlan p = PlanReservations(jobs, ReserveOptions(500));
  EXPECT_DOUBLE_EQ(p.hold_s.at("a"), 0);
  EXPECT_DOUBLE_EQ(p.hold_s.at("b"), 0);
  EXPECT_EQ(p.unreserved, 4);
  EXPECT_TRUE(p.windows.empty());
}

TEST(PlanReservations, AJobWhoseFloorCoversItsUpdateOrWithNoStepLengthIsLeftAlone) {
  ReservationJob covered = UpdateJob(true, 0);
  covered.update_w = 100;
  ReservationJob unknown = UpdateJob(true, 0);
  unknown.timeline.rollout_s = 0;
  unknown.timeline.rest_s = 0;
  const ReservationPlan p =
      PlanReservations({{"covered", covered}, {"unknown", unknown}}, ReserveOptions(300));
  EXPECT_TRUE(p.windows.empty());
  EXPECT_EQ(p.unreserved, 0);
  EXPECT_DOUBLE_EQ(p.hold_s.at("covered"), 0);
  EXPECT_DOUBLE_EQ(p.hold_s.at("unknown"), 0);
}

TEST(PlanReservations, AJobHeldNowKeepsItsHoldAndItsUpdateAfterItIsPlaced) {
  // Held 4 s more, then a 10 s rollout: its update at [14, 24), reserved from 11 s.
  ReservationJob held = UpdateJob(true, 0);
  held.timeline.held_left_s = 4;
  const ReservationPlan p = PlanReservations({{"h", held}}, ReserveOptions(600));
  ASSERT_FALSE(p.windows.empty());
  EXPECT_DOUBLE_EQ(p.windows[0].from_s, 11);
  EXPECT_DOUBLE_EQ(p.windows[0].to_s, 24);
  EXPECT_DOUBLE_EQ(p.hold_s.at("h"), 0);
  EXPECT_EQ(p.windows.size(), 1u);  // its next step's hold is decided when the hold ends
}

}  // namespace
}  // namespace headroom::coord
