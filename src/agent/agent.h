// The agent's core: one decision per control interval from telemetry, the trainer's reports and
// a controller, with the safety rules of docs/AGENT.md. No I/O, no clock, no threads: the runner
// (runner.h) feeds it samples and times, the HTTP server reads its state under the runner's lock.
//
// Safety:
// - telemetry that fails, or has no power, or is older than `stale_after_s` -> the safe
//   actuation at once (this interval), with the reason;
// - no trainer report for `report_timeout_s` -> the controller keeps acting on power alone (the
//   phase is taken to be rollout, where concurrency moves power);
// - every actuation carries `valid_for_s`: a client that hears nothing newer falls back to the
//   safe values after it.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "agent/group_size_gate.h"
#include "analysis/window_stats.h"
#include "control/actuators.h"
#include "control/controller.h"
#include "telemetry/source.h"

namespace headroom::agent {

struct AgentConfig {
  double interval_s = 0.5;
  double budget_w = 0.0;  // per GPU: the budget in force until SetBudget says otherwise
  std::string budget_from = "--budget-w";  // where it came from
  // The job's power per GPU at its lowest actuation, when known: a budget below it is taken but
  // cannot be met by steering the workload, and the reason says so.
  std::optional<double> floor_w;
  control::ActuatorLimits limits;
  int safe_concurrency = 1;
  int safe_group_size = 1;
  // What the agent announces before its first decision (default: the safe values) — the
  // trainer's configured values, when the operator knows them and wants no slow start.
  std::optional<int> initial_concurrency;
  std::optional<int> initial_group_size;
  double valid_for_s = 5.0;
  double stale_after_s = 1.5;
  double report_timeout_s = 30.0;
  // When and to what group size may change (group_size_gate.h): at step boundaries, among the
  // choices, at most once every min_steps steps. The initial and safe sizes are choices.
  GroupSizeRule group_size_rule;
};

struct Actuation {
  int concurrency = 0;
  int group_size = 0;
  uint64_t seq = 0;  // increases with every change
  double valid_for_s = 0.0;
  std::string reason;
  double t_s = 0.0;
  // A site's staggering (docs/FLEET.md): wait hold_s before starting the next step, once per
  // hold_id (0: none). The trainer honours it at its step boundary (clients/python: take_hold).
  double hold_s = 0.0;
  int64_t hold_id = 0;
  // In a site: the trainer fails closed -- when it cannot hear the agent past valid_for_s it
  // holds at its step boundary instead of running on safe values (docs/FLEET.md).
  bool site = false;
  // The site has not admitted the job: start no step until this is false (the trainer holds
  // at its step boundary, reporting "idle"; clients/python: take_hold).
  bool standby = false;
  // Hybrid actuation (docs/CONTROL.md): the controller's hardware power limit per GPU; 0: none.
  // The twin source applies it; on GPUs, --guard-power-limit lets the agent write it (guard.h).
  double power_limit_w = 0.0;
};

struct TrainerReport {
  int step = 0;
  control::Phase phase = control::Phase::kRollout;
  double tokens = 0.0;    // tokens so far
  int in_flight = 0;      // sequences in flight
  double progress = 0.0;  // rollout progress, when the trainer knows it
  // The group size in force this step, when the trainer says (a new one applies from the next
  // step boundary); otherwise the agent takes its own last decision.
  std::optional<int> group_size;
};

inline constexpr std::array<double, 3> kWindowsS = {0.5, 30.0, 300.0};

struct AgentStatus {
  double t_s = 0.0;
  double budget_w = 0.0;    // per GPU, in force
  std::string budget_from;  // where it came from
  std::optional<double> floor_w;
  int gpus = 0;                 // of the last good sample
  std::vector<double> power_w;  // last good sample, per GPU
  // The power limit in force on each GPU (the telemetry's enforced limit) of the last good
  // sample; empty where the source does not say. What the controller asks is
  // actuation.power_limit_w.
  std::vector<std::optional<double>> power_limit_w;
  double job_power_w = 0.0;  // mean over GPUs
  Actuation actuation;
  uint64_t decisions = 0;
  uint64_t telemetry_errors = 0;
  uint64_t safe_decisions = 0;
  uint64_t trace_write_errors = 0;  // failed writes to --trace-out or --site-log
  std::optional<TrainerReport> report;
  double report_age_s = -1.0;  // -1: never
  uint64_t reports = 0;        // trainer reports taken
  // Per kWindowsS, on the telemetry the agent saw; none before the first window closes.
  std::array<std::optional<double>, 3> violation_fraction{};
  std::array<uint64_t, 3> windows{};       // closed
  std::array<uint64_t, 3> windows_over{};  // closed over the budget in force over them
  // The decision's concurrency is the lowest its range allows: steering the workload has
  // nothing left to lower (docs/AGENT.md, "Monitoring").
  bool concurrency_at_minimum = false;
  // The floor is known and the budget in force is below it: the budget cannot be met by steering
  // the workload.
  bool budget_below_floor = false;
  // Group size changes decided so far, and the trainer step of the last (none before it).
  int group_size_changes = 0;
  std::optional<int> group_size_changed_at_step;
  double tokens_per_s = 0.0;
  // Decision latency (telemetry read + decision + publication) over the last kLatencyKeep
  // decisions, nearest-rank quantiles; 0 with none recorded.
  double decision_p50_s = 0.0;
  double decision_p99_s = 0.0;
  double decision_max_s = 0.0;
  uint64_t latency_samples = 0;
  double latency_sum_s = 0.0;  // over all decisions measured
  int long_polls_waiting = 0;  // filled in by the server
};

inline constexpr size_t kLatencyKeep = 4096;

// One decision as the dashboard draws it.
struct HistoryPoint {
  double t_s = 0.0;
  std::vector<double> power_w;                       // per GPU; empty when the telemetry failed
  double budget_w = 0.0;                             // per GPU, in force for this decision
  std::vector<std::optional<double>> power_limit_w;  // per GPU, in force; empty: unknown
  std::optional<control::Phase> phase;  // the trainer's, from a fresh report; none without
  double unix_s = 0.0;  // wall-clock time of the decision (Unix seconds); 0: not known
  int concurrency = 0;
  int group_size = 0;
  double tokens_per_s = 0.0;
};

inline constexpr size_t kHistoryKeep = 600;  // 5 minutes at 0.5 s

class Agent {
 public:
  // REQUIRES: config.budget_w > 0, interval_s > 0; `controller` outlives the agent.
  Agent(AgentConfig config, control::Controller& controller);
  Agent(const Agent&) = delete;  // its windows point to its own budget schedule
  Agent& operator=(const Agent&) = delete;

  // One control interval at `now_s` with what the source returned.
  // `unix_s`: the wall clock at this decision, for the history (0: not known).
  const Actuation& Tick(double now_s, const Result<telemetry::Sample>& sample, double unix_s = 0.0);
  // The budget per GPU from the next decision on. REQUIRES: budget_w > 0 and finite.
  void SetBudget(double budget_w, std::string from);
  // The site's hold before the next step (0: none); a change is a new actuation (seq).
  void SetHold(double hold_s, int64_t hold_id);
  // In a site, and whether it holds the job at standby; a change is a new actuation (seq).
  void SetSite(bool site, bool standby);
  double budget_w() const { return budget_w_; }
  const std::string& budget_from() const { return budget_from_; }
  void Report(const TrainerReport& report, double now_s);
  // The runner's measure of one decision's latency (it owns the clock).
  void RecordDecisionLatency(double seconds);
  // A write to the agent's trace or fleet log failed (a full disk): counted, the loop goes on.
  void NoteTraceWriteError() { ++trace_write_errors_; }

  const Actuation& actuation() const { return actuation_; }
  double tokens_per_s() const { return tokens_per_s_; }  // from the trainer's reports
  const std::optional<TrainerReport>& report() const { return report_; }  // the last one
  AgentStatus Status(double now_s) const;
  // The decisions after `after_t_s` still kept (the last kHistoryKeep), oldest first.
  std::vector<HistoryPoint> History(double after_t_s) const;
  const AgentConfig& config() const { return config_; }

 private:
  void Set(int concurrency, int group_size, std::string reason, double now_s);

  AgentConfig config_;
  control::Controller& controller_;
  GroupSizeGate group_gate_;
  double budget_w_;  // per GPU, in force
  std::string budget_from_;
  analysis::BudgetSchedule budgets_;  // the budget at each decision: what the windows score
                                      // against (declared before stats_, which point to it)
  Actuation actuation_;
  control::Applied applied_;
  std::vector<double> power_w_;
  std::vector<std::optional<double>> power_limit_w_;  // of the last good sample
  double last_good_s_ = -1.0;
  std::optional<TrainerReport> report_;
  double report_t_s_ = -1.0;
  double tokens_at_report_ = 0.0;
  double tokens_per_s_ = 0.0;
  uint64_t reports_ = 0;
  uint64_t decisions_ = 0;
  uint64_t telemetry_errors_ = 0;
  uint64_t safe_decisions_ = 0;
  uint64_t trace_write_errors_ = 0;
  std::array<analysis::WindowStats, 3> stats_;
  bool saw_sample_ = false;
  void Remember(double now_s, bool good, double unix_s, std::optional<control::Phase> phase);

  std::deque<HistoryPoint> history_;
  std::vector<double> latency_s_;  // ring of the last kLatencyKeep
  uint64_t latency_samples_ = 0;
  double latency_sum_s_ = 0.0;
};

}  // namespace headroom::agent
