// What `headroom fleet-sim` measures (docs/SITE.md, "fleet-sim"): plain data, for the report
// and the JSON.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace headroom::site_sim {

inline constexpr std::array<double, 3> kFleetWindowsS = {0.5, 30.0, 300.0};
inline constexpr std::array<const char*, 3> kFleetWindowNames = {"0.5s", "30s", "5min"};

struct FleetSimJobResult {
  std::string job;
  std::string scenario;
  int gpus = 0;
  double tokens = 0.0;
  double energy_j = 0.0;
  double mean_grant_w = 0.0;  // time-mean of the job budget it acted on
  double floor_w = 0.0;
  bool admitted = true;
  // What steered it: "ppo", "pid" or "uncontrolled" (its trainer's own settings), and the policy
  // file a ppo job ran ("" otherwise); `controller_note` says why a job asked for ppo got pid.
  std::string controller;
  std::string policy;
  std::string controller_note;
};

// The opportunistic workers of a run (docs/SITE.md, "Spare power in fleet-sim").
struct OpportunisticRun {
  int workers = 0;
  double energy_j = 0.0;          // all they drew: computing and exchanging
  double compute_energy_j = 0.0;  // of it, computing (training)
  double tokens = 0.0;            // in completed rounds
  int rounds = 0;
  double worker_s_paused = 0.0;   // worker-seconds with no watts granted
  double worker_s_waiting = 0.0;  // in a round but not computing (exchange, a paused peer)
  // Coordination: membership (the workers' store requests, and the coordinator's in proportion
  // to the members they are), the exchanges (CPU and bytes), resyncs (bytes).
  uint64_t store_requests = 0;
  double membership_j = 0.0;
  double exchange_j = 0.0;
  double bytes_sent = 0.0;
  int resyncs = 0;
  // Per shrinking grant of a worker: from the coordinator's write to the worker's power at or
  // below it.
  std::vector<double> shrink_s;
  std::vector<double> power_w;  // per second, all workers together
  std::vector<int> training;    // per second, workers drawing power
  double coordination_j() const { return membership_j + exchange_j; }
};

struct FleetSimRun {
  double tokens = 0.0;
  double energy_j = 0.0;
  // Of the site's true power (sum of the twins'), against the site budget.
  std::array<double, 3> violation_fraction{};
  std::array<double, 3> peak_fraction_of_nameplate{};
  // As `headroom fleet` defines it (planning::OversubscriptionFactor), of this one run: nameplate
  // / (its largest 30 s window of true power x 1.05).
  double oversubscription_factor = 0.0;
  // Holds taken (the twins' time held): how many, how long in all, and their cost in tokens
  // (each job's held time x its tokens/s while not held) as % of the run's tokens.
  uint64_t hold_count = 0;
  double hold_total_s = 0.0;
  double hold_tokens_cost_pct = 0.0;
  // Per site budget decrease of the schedule: settle_s of the site's true power
  // (analysis::SettleTracker: until its trailing 1 s mean stays at or below the new budget for
  // 5 s), and the decreases it never settled before the next change.
  std::vector<double> settle_s;
  size_t unsettled = 0;
  std::vector<FleetSimJobResult> jobs;
  // For the report: per second of simulated time.
  std::vector<double> t_s;
  std::vector<double> site_power_w;
  std::vector<std::vector<double>> grant_w;  // per job, per second
  std::vector<double> budget_w;              // the site budget of the moment, per second
  // Per job, per second: its phase at that instant (common/phase.h; a hold is kIdle).
  std::vector<std::vector<uint8_t>> phase;
  OpportunisticRun opportunistic;  // site_power_w includes theirs; tokens and energy_j do not
};

struct FleetSimResult {
  std::string store;                        // "memory" or "etcd"
  std::string allocation = "proportional";  // or "value"
  std::string fairness = "none";            // or "max-min"
  std::string offsets = "aligned";          // or "random"
  bool job_control = true;
  bool guard_power_limit = false;
  std::string stagger = "none";  // or "greedy", "descent"
  double max_hold_s = 0.0;
  double site_budget_w = 0.0;
  double reserve_w = 0.0;
  double nameplate_w = 0.0;
  double duration_s = 0.0;
  uint64_t reassignments = 0;
  uint64_t ledger_writes = 0;
  FleetSimRun site;         // under the site budget
  FleetSimRun baseline;     // the same jobs and seeds with no budget at all (uncontrolled)
  FleetSimRun own_budgets;  // the same jobs and seeds, each on its own scenario budget
  // With a schedule: the site's tokens with the budget held where it started (what the
  // schedule cost), and its decreases.
  bool scheduled = false;
  double tokens_unscheduled = 0.0;
  uint64_t decreases = 0;
  // With opportunistic workers: the same site without them (what they cost the jobs).
  bool opportunistic = false;
  FleetSimRun alone;
};

}  // namespace headroom::site_sim
