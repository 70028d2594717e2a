// One simulated site: its store, its coordinator and its members, stepped in lockstep on
// simulated time. `headroom fleet-sim` runs one per comparison (the site under its budget, and
// the same jobs with no site at all); `headroom sites-sim` one per site.
//
// A site's guaranteed load is twin jobs (each a twin steered by a twin-mode agent with the
// scenario's controller, each agent a coord::SiteMember), or one member whose power a trace
// gives (`trace_jobs_w`: the site's jobs as sites-sim sees them), or both. Opportunistic members
// join through JoinOpportunistic (on a store that counts their requests) and belong to their
// caller, which steps them.
//
// One tick, at simulated time t = k x interval_s, is in this order:
//   BeginTick(k)  the site's clock to t; every job reads its twin, takes its budget from its
//                 member, decides and acts, and its member steps; the trace's member steps;
//   (the caller)  each opportunistic member: StepOpportunistic, then Observe what it draws;
//   EndTick(k)    the site budget's requests due by t, then the coordinator's period when k is
//                 a multiple of period_s / interval_s.
// Deterministic for a seed: nothing depends on wall time, on timing or on lease ids.
// Not thread-safe: one caller. Members joined must be destroyed before the site.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "common/phase.h"
#include "coord/coordinator.h"
#include "coord/counting_store.h"
#include "coord/member.h"
#include "coord/memory_store.h"
#include "coord/site_schedule.h"
#include "site_sim/fleet_sim_result.h"

namespace headroom::twin {
struct Scenario;
}  // namespace headroom::twin

namespace headroom::site_sim {

struct FleetSimJobSpec {
  std::string scenario;
  int count = 1;
};

enum class SimSiteMode {
  kSite,          // a store and a coordinator; every job a member of the site
  kOwnBudgets,    // no store: each job on its own scenario's budget
  kUncontrolled,  // no store: each job at its trainer's defaults (no budget at all)
};

struct SimSiteConfig {
  std::string name = "fleet-sim";  // its keys (/headroom/NAME/) and its coordinator's id
  SimSiteMode mode = SimSiteMode::kSite;
  double interval_s = 0.5;  // one tick
  double period_s = 1.0;    // the coordinator's
  int64_t lease_ttl_s = 3;
  // The twin jobs and what steers them (as FleetSimConfig's fields of the same names).
  std::vector<FleetSimJobSpec> jobs;
  uint64_t seed = 1;
  std::string controller = "ppo";
  std::string policies_dir;
  bool job_control = true;
  bool guard_power_limit = false;
  bool random_offsets = false;
  bool phase_demand = false;
  bool publish_phase_changes = false;  // each job publishes each change of phase (for loans)
  // The guaranteed jobs as one member ("site-jobs", nameplate the site budget): its power and
  // demand at t_s. Empty: none. REQUIRES: mode kSite.
  std::function<double(double t_s)> trace_jobs_w;
  // The coordinator (coord::CoordinatorConfig's fields of the same names; loan_lead_s 0: no
  // loans).
  double site_budget_w = 0.0;
  double reserve_w = 0.0;
  coord::Allocation allocation = coord::Allocation::kProportional;
  coord::Fairness fairness = coord::Fairness::kNone;
  double max_hold_s = 0.0;
  int stagger_passes = 1;
  bool reserve_updates = false;
  double loan_lead_s = 0.0;
  double loan_cover = 0.5;
  double loan_margin = 0.05;
  // Demand response (coord/site_schedule.h): each change asked budget_lead_s ahead.
  std::vector<coord::BudgetEvent> schedule;
  double budget_lead_s = 0.0;
};

// What an opportunistic member may draw now: it steps, then its grant when granted, else 0 W.
double StepOpportunistic(coord::SiteMember& member);

class SimSite {
 public:
  // `external`: the site's store in kSite mode (its keys under /headroom/NAME/ deleted first);
  // null: one in memory on the site's simulated clock. The coordinator logs to `log`.
  // Fails on a scenario that does not load or has no rollout, or a policy that does not load.
  static Result<std::unique_ptr<SimSite>> Build(const SimSiteConfig& config, coord::Store* external,
                                                const Logger& log);
  ~SimSite();
  SimSite(const SimSite&) = delete;
  SimSite& operator=(const SimSite&) = delete;

  // REQUIRES: k >= 0, one more than at the last call (0 first).
  void BeginTick(int64_t k);
  // Returns whether the coordinator stepped. REQUIRES: after BeginTick(k), same k.
  bool EndTick(int64_t k);
  // A member of class opportunistic, on the counted store. REQUIRES: mode kSite.
  std::unique_ptr<coord::SiteMember> JoinOpportunistic(const std::string& job, double nameplate_w);
  // The coordinator resigns and every job leaves (kSite; else nothing).
  void Close();

  const SimSiteConfig& config() const { return config_; }
  double now_s() const { return now_s_; }
  // The twin jobs' energy over the interval that ended at the last BeginTick (0 at k = 0).
  double jobs_energy_j() const { return jobs_energy_j_; }
  double nameplate_w() const { return nameplate_w_; }  // the twin jobs'
  size_t job_count() const;
  double JobGrantW(size_t i) const;  // the budget job i acts on now (all its GPUs)
  Phase JobPhase(size_t i) const;    // its twin's phase now (a hold is kIdle)
  double JobHeldS(size_t i) const;   // its twin's time held in all
  uint64_t JobHolds(size_t i) const;
  // Job i since the start; mean_grant_w over duration_s.
  FleetSimJobResult JobResult(size_t i, double duration_s) const;
  // The ledger's grant to `job` (0 W where it has none); none before the first ledger.
  std::optional<double> LedgerGrantW(const std::string& job) const;
  uint64_t reassignments() const;
  uint64_t ledger_writes() const;
  uint64_t opportunistic_requests() const;  // the store requests of the opportunistic members
  uint64_t coordinator_requests() const;

 private:
  struct Job;
  explicit SimSite(const SimSiteConfig& config);
  Status Open(coord::Store* external, const Logger& log);
  Status AddJobs();
  Status AddJob(const std::string& scenario_name, const twin::Scenario& scenario, int copy,
                uint64_t index);
  Status JoinJob(Job& job, const std::string& scenario_name);
  void TickJob(Job& j, int64_t k);
  void TickTraceJobs();

  // Constant after construction.
  const SimSiteConfig config_;
  const int64_t per_period_;
  // The site's store and who uses it (kSite only).
  std::optional<coord::MemoryStore> memory_;
  coord::Store* store_ = nullptr;
  std::optional<coord::CountingStore> opportunistic_store_, coordinator_store_;
  std::vector<std::unique_ptr<Job>> jobs_;
  std::unique_ptr<coord::SiteMember> trace_jobs_;
  std::unique_ptr<coord::Coordinator> coordinator_;
  std::vector<coord::BudgetRequest> requests_;
  size_t next_request_ = 0;
  Logger log_;
  // Per scenario: the value curve per GPU (allocation by value), the step time at defaults.
  std::map<std::string, std::vector<coord::ValuePoint>> curves_;
  std::map<std::string, double> step_s_;
  // The simulation's state.
  double now_s_ = 0.0;
  double nameplate_w_ = 0.0;
  double jobs_energy_j_ = 0.0;
};

}  // namespace headroom::site_sim
