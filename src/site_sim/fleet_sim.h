// `headroom fleet-sim`: a site on one machine, with nothing to install. One coordinator and one
// twin-mode agent per job (the scenarios' controllers), each agent a coord::SiteMember, all in
// one process over one Store (in memory, or a real etcd), stepped in lockstep on simulated time:
// every 0.5 s each agent reads its twin, takes its budget from its member, decides and acts;
// each member steps; every period the coordinator steps. Deterministic for a seed and the same
// over either store (nothing depends on timing or on lease ids). Then the same jobs and seeds
// again with no site budget: with no budget at all (the trainers' own settings), and each on its
// own scenario budget -- what the site budget costs. Each of these runs is one SimSite
// (site_sim/sim_site.h) built, ticked and measured.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "coord/plan.h"
#include "coord/site_schedule.h"
#include "coord/store.h"
#include "site_sim/fleet_sim_result.h"
#include "site_sim/sim_site.h"

namespace headroom::site_sim {

// Opportunistic DiLoCo workers beside the jobs (docs/SITE.md, "Spare power in fleet-sim"):
// each an opportunistic member of the site, its power diloco_site/site_power.h's model (threads x
// duty x watts per core), its progress the measured rate of the real worker's inner step, its
// rounds' exchange and its membership the measured costs below.
struct OpportunisticConfig {
  int workers = 0;
  int threads = 32;              // each worker's cores: its demand is threads x watts_per_core
  double watts_per_core = 10.0;  // as the worker's --cpu-watts-per-core
  int inner_steps = 100;         // H
  // One inner step of one thread's batch (8 x 64 bytes, the tiny model) at duty 1: 512 tokens
  // at 6,474 tokens/s (docs/PERFORMANCE.md, `make bench-diloco`); a worker's threads each step
  // their own batch (data parallel inside the worker, assumed linear in threads).
  double step_s = 512.0 / 6474.0;
  double tokens_per_thread_step = 512.0;
  int64_t parameters = 495360;  // the tiny model
  // A round's exchange per member: CPU seconds per group member (encode, HMAC, decode and
  // screen each contribution: 0.2 s at 4 members in `make diloco-results`), its bytes (the
  // int8 all-gather's frames) over the site's network, nine round trips (etcd and Gloo).
  double comm_cpu_s_per_member = 0.05;
  double link_bits_per_s = 10e9;
  double rtt_s = 0.0005;
  // A site's network per byte sent: one switch at 2 W/Gbps and four transceivers at 0.09 W/Gbps
  // (2024 devices; arXiv 2504.14022, appendix "Energy intensity of network equipment").
  double network_j_per_byte = 2.36e-9 * 8.0;
  // One store request (client and etcd): 1.35 ms of a core measured for a put
  // (scripts/etcd_request_cost.py), at watts_per_core.
  double store_request_cpu_s = 0.00135;
};

// One worker's int8 frame (diloco_core/contribution.h): header, per-block scales, a byte a
// parameter, the HMAC.
double FrameBytes(const OpportunisticConfig& o);
// A round's exchange with k members: each member's CPU, the all-gather's bytes over one link,
// nine round trips of rtt_s.
double ExchangeS(const OpportunisticConfig& o, int k, double rtt_s);

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
  std::string controller = "ppo";  // ppo (a scenario without a policy file: pid) or pid
  std::string policies_dir;        // <scenario>.json; "": none (every job pid)
  // How the coordinator splits the watts above the floors (docs/SITE.md). By value, each job
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
  // Reservations before the update (coord/reservation.h) instead of staggering's holds: each
  // job publishes its update's watts (its scenario's log-prob or training power, the higher, at
  // full clocks); the holds, up to max_hold_s.
  bool reserve_updates = false;
  // Demand response (coord/site_schedule.h): the site budget's changes, each asked of the
  // coordinator `budget_lead_s` before it starts (a decrease, within its notice) or when it
  // starts (an increase); 0: three periods. Windows count against the budget of the moment.
  std::vector<coord::BudgetEvent> schedule;
  double budget_lead_s = 0.0;
  // Demand by phase for every job (coord::MemberConfig::phase_demand; with allocation by value
  // always).
  bool phase_demand = false;
  OpportunisticConfig opportunistic;
  // With opportunistic workers: the coordinator's loans (coord/plan.h) over this lead (0: three
  // periods), and the jobs publish each change of phase.
  double loan_lead_s = 0.0;
  double loan_cover = 0.5;
  double loan_margin = 0.05;
};

// "a100-72b-tp4:2,a100-14b-tp2:2,a100-7b-tp1:4".
Result<std::vector<FleetSimJobSpec>> ParseFleetJobs(std::string_view text);

// `store`: the site's store (its keys under /headroom/fleet-sim/ are deleted first); null: one in
// memory on simulated time. `store_name`: "memory" or "etcd". `progress(done_s, total_s)` as it
// goes; `sleep_until_wall_s` paces it (speed > 0).
Result<FleetSimResult> RunFleetSim(const FleetSimConfig& config, coord::Store* store,
                                   const std::string& store_name,
                                   const std::function<void(double, double)>& progress,
                                   const Logger& log);

}  // namespace headroom::site_sim
