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
