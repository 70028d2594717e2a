// Phase staggering (docs/SITE.md, "Staggering"): the coordinator may ask a job to delay the
// start of its next step by a hold, so that the jobs' high-power rollouts interleave instead of
// piling up on the site budget. Pure: no store, no clock.
//
// Each job's power over the next minutes is predicted from its step timeline: the phase it is
// in (rollout, or the rest of the step) and for how long, its typical rollout and rest, and its
// power in each; a hold shifts everything after the current step by the hold, at the job's
// held power. What the site draws above its budget must be taken from the rollouts by their
// grants, at the site's marginal value; a hold costs its duration x the job's tokens/s. The
// planner picks the holds that minimise the predicted tokens lost: excess energy x value +
// holds' cost. Greedy: each job in the order its next step starts, its best hold given the
// others'; `passes` > 1 repeats it (coordinate descent) until nothing improves.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace headroom::coord {

struct StepTimeline {
  int64_t step = 0;              // the step in progress (a hold applies to step + 1)
  bool in_rollout = false;       // now
  double phase_elapsed_s = 0.0;  // in the current part (rollout, or the rest of the step)
  double rollout_s = 0.0;        // a typical step's rollout
  double rest_s = 0.0;           // and the rest of it (log-probs, training, sync, checkpoint)
  double rollout_w = 0.0;        // the job's power in rollout, unconstrained
  double rest_w = 0.0;           // in the rest
  double held_w = 0.0;           // while held (idle, the model loaded)
  double held_left_s = 0.0;      // > 0: held now, for this much longer (no other hold then)
};

struct StaggerJob {
  StepTimeline timeline;
  double tokens_per_s = 0.0;  // over whole steps: what a second of hold costs
};

struct StaggerOptions {
  double budget_w = 0.0;            // the site budget less the reserve
  double horizon_s = 600.0;         // how far ahead power is predicted
  double dt_s = 1.0;                // on this grid
  double max_hold_s = 0.0;          // 0: no holds
  double hold_step_s = 5.0;         // holds tried: 0, step, 2 step, ..., max
  double value_tokens_per_j = 0.0;  // what a joule above the budget costs, taken from rollouts
  int passes = 1;                   // 1: greedy; more: coordinate descent
};

struct StaggerPlan {
  std::map<std::string, double> hold_s;                // every job, 0 for none
  double peak_before_w = 0.0, peak_after_w = 0.0;      // predicted, over the horizon
  double excess_before_j = 0.0, excess_after_j = 0.0;  // above the budget
  double hold_cost_tokens = 0.0;                       // Σ hold x tokens/s
  double tokens_saved = 0.0;  // (excess before - after) x value - hold cost (>= 0)
};

// A job's predicted power on the grid t = 0, dt, ... < horizon, with `hold_s` before its next
// step. A timeline with no step length predicts its current part's power throughout.
std::vector<double> PredictPower(const StepTimeline& t, double hold_s, double horizon_s,
                                 double dt_s);

// The holds. REQUIRES: dt_s > 0, horizon_s >= dt_s, hold_step_s > 0.
StaggerPlan PlanHolds(const std::map<std::string, StaggerJob>& jobs, const StaggerOptions& o);

}  // namespace headroom::coord
