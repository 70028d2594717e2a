// Reservations before the update (docs/SITE.md, "Reservations before the update"): a job's
// update (log-probs, training, sync: the part of its step after the rollout) draws near its
// nameplate and cannot be steered by the workload, so the coordinator reserves its watts before
// it starts -- the job's grant is raised to them (down first: the others' come down to make the
// room) -- or, when the site cannot hold that update beside the others already reserved, holds
// the job at its next step boundary until it can. Pure: no store, no clock.
//
// Each job's updates are predicted from its step timeline (coord/stagger.h): the one of the
// step in progress (fixed: a hold applies only before the next step), then the next one, which
// a hold of h moves by h. A reservation begins `lead_s` before its update (the grants have time
// to move) and ends with it. Reserving raises the job's floor to its update's watts while it
// lasts, so what must fit, at every instant of the horizon, is
//
//     sum over jobs of max(floor, reserved watts then) <= budget_w.
//
// The updates in progress are placed first, in the order they started; then each job's next one
// in the order it would start, each with the least hold in {0, hold_step_s, ..., max_hold_s}
// that fits, or, when none does, none: that update runs unreserved (its grant as allocated,
// its guard under it), as every update did before. A hold only delays; a reservation only
// moves targets. Neither touches the invariant (coord/plan.h): grants still come down before
// they go up.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "coord/stagger.h"

namespace headroom::coord {

struct ReservationJob {
  StepTimeline timeline;
  double floor_w = 0.0;   // its floor in the ledger
  double update_w = 0.0;  // the watts its update draws unconstrained (<= floor_w: nothing to do)
};

struct ReservationOptions {
  double budget_w = 0.0;     // the site budget less the reserve, the waiting floors, the standby
  double lead_s = 3.0;       // a reservation begins this long before its update
  double horizon_s = 600.0;  // how far ahead updates are placed
  double dt_s = 1.0;         // on this grid
  double max_hold_s = 0.0;   // 0: no holds (reservations only where they fit as they come)
  double hold_step_s = 5.0;  // holds tried: 0, step, 2 step, ..., max
};

struct ReservationWindow {
  std::string job;
  double from_s = 0.0;  // the reservation's start (the update's less lead_s), from now
  double to_s = 0.0;    // the update's end
  double update_w = 0.0;
  bool next = false;  // the next step's update (a hold moved it); else the step in progress's
};

struct ReservationPlan {
  // Jobs whose reservation is in force now, at their update's watts: their floor is raised to
  // this in the targets (PlanInput::reserved_w).
  std::map<std::string, double> reserved_w;
  // Every job with a timeline: its hold before its next step (0: none).
  std::map<std::string, double> hold_s;
  std::vector<ReservationWindow> windows;  // placed, in the order placed
  int unreserved = 0;  // updates within the horizon no hold up to max_hold_s could fit
};

// REQUIRES: dt_s > 0, horizon_s >= dt_s, hold_step_s > 0, lead_s >= 0.
ReservationPlan PlanReservations(const std::map<std::string, ReservationJob>& jobs,
                                 const ReservationOptions& o);

}  // namespace headroom::coord
