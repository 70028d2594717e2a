// `headroom fleet-sim`: a site on one machine, with nothing to install. One coordinator and one
// twin-mode agent per job (the scenarios' controllers), each agent a coord::FleetMember, all in
// one process over one Store (in memory, or a real etcd), stepped in lockstep on simulated time:
// every 0.5 s each agent reads its twin, takes its budget from its member, decides and acts;
// each member steps; every period the coordinator steps. Deterministic for a seed and the same
// over either store (nothing depends on timing or on lease ids). Then the same jobs and seeds
// again with no site budget: with no budget at all (the trainers' own settings), and each on its
// own scenario budget -- what the site budget costs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/error.h"
#include "coord/plan.h"
#include "coord/site_schedule.h"
#include "coord/store.h"
#include "sim/fleet_sim_result.h"

namespace headroom::sim {

struct FleetSimJobSpec {
  std::string scenario;
  int count = 1;
};

struct FleetSimConfig {
  std::vector<FleetSimJobSpec> jobs;
  double site_budget_w = 0.0;
  double reserve_w = 0.0;
  double duration_s = 3600.0;
  double speed = 20.0;  // simulated seconds per wall second; 0: as fast as it can
  uint64_t seed = 1;
  double interval_s = 0.5;
  double period_s = 1.0;
  int64_t lease_ttl_s = 3;
  std::string controller = "ppo";         // ppo (a scenario without a policy file: pid) or pid
  std::string policies_dir = "policies";  // <scenario>.json
  // How the coordinator splits the watts above the floors (docs/FLEET.md). By value, each job
  // publishes its scenario's rollout value curve (twin::RolloutValueCurve) and its demand by
  // phase (the floor outside rollout).
  coord::Allocation allocation = coord::Allocation::kProportional;
  coord::Fairness fairness = coord::Fairness::kNone;
  // Where each job is in its step at the start: all at the start of their first step
  // (aligned), or each advanced by a draw uniform in [0, its typical step time) at its
  // defaults (random; the draws depend on the seed and the job's place only).
  bool random_offsets = false;
  // Off: every job at its trainer's defaults (no controller), the site's grant enforced by the
  // hardware power limit alone (per GPU = grant / GPUs; the floor, the lowest limit).
  bool job_control = true;
  // With job control: the agent's --guard-power-limit under each controller (agent/guard.h: a
  // sustained excess over the budget sets the GPUs' limits to it, which then follow the
  // budget); the floor is then the lowest power limit, as the agent's.
  bool guard_power_limit = false;
  // Staggering (coord/stagger.h): holds of up to max_hold_s before a job's next step, planned
  // by the coordinator; 0: none. passes 1: greedy, more: coordinate descent.
  double max_hold_s = 0.0;
  int stagger_passes = 1;
  // Demand response (coord/site_schedule.h): the site budget's changes, each asked of the
  // coordinator `budget_lead_s` before it starts (a decrease, within its notice) or when it
  // starts (an increase); 0: three periods. Windows count against the budget of the moment.
  std::vector<coord::BudgetEvent> schedule;
  double budget_lead_s = 0.0;
};

// "a100-72b-tp4:2,a100-14b-tp2:2,a100-7b-tp1:4".
Result<std::vector<FleetSimJobSpec>> ParseFleetJobs(std::string_view text);

// `store`: the site's store (its keys under /headroom/fleet-sim/ are deleted first); null: one in
// memory on simulated time. `store_name`: "memory" or "etcd". `progress(done_s, total_s)` as it
// goes; `sleep_until_wall_s` paces it (speed > 0).
Result<FleetSimResult> RunFleetSim(const FleetSimConfig& config, coord::Store* store,
                                   const std::string& store_name,
                                   const std::function<void(double, double)>& progress,
                                   const std::function<void(const std::string&)>& log);

}  // namespace headroom::sim
