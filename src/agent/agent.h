// The agent's core: one decision per control interval from telemetry, the trainer's reports and
// a controller, with the safety rules of docs/AGENT.md. No I/O, no clock, no threads: the runner
// (runner.h) feeds it samples and times, the HTTP server reads its state under the runner's lock.
//
// Safety:
// - telemetry that fails, or has no power, or is older than `stale_after_s` -> the safe
//   actuation at once (this interval), with the reason;
// - a trainer's report stands until its next one (the client's heartbeat re-sends it every few
//   seconds); a trainer that has reported and then says nothing for `report_timeout_s` is taken
//   as gone -> the safe actuation (and, with `silent_power_limit`, the budget as the hardware
//   power limit), with the reason; one that never reported -> the controller acts on power alone
//   (the phase taken to be rollout, where concurrency moves power);
// - the trainer's own values are checked against the decisions (docs/TRAINERS.md, "Mismatch"):
//   a group size that differs from the decision at 2 step boundaries in a row, or sequences in
//   flight past concurrency x engines for 2 reports in a row, is a mismatch: a warning, and from
//   then on the controller sees the trainer's values (a group size that never moves pins the
//   decision to it);
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
#include "common/log.h"
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
  // A trainer that reported and then is silent this long is taken as gone (--report-timeout-s).
  double report_timeout_s = 60.0;
  // While the trainer is gone: the budget as the hardware power limit (--guard-power-limit).
  bool silent_power_limit = false;
  // The longest hold before a step the agent passes on (--max-hold-s); longer ones are cut to it.
  // A trainer compares it with its collective timeout (clients/python: check_collective_timeout).
  double max_hold_s = 300.0;
  // Fenced in a site with --guard-power-limit: the GPUs' lowest power limit, set at once (0: none).
  double fenced_power_limit_w = 0.0;
  // The admission the policy was trained for ("continuous" or "chunked"); none: not a policy.
  std::optional<std::string> policy_admission;
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
  // A site's staggering (docs/SITE.md): wait hold_s before starting the next step, once per
  // hold_id (0: none). The trainer honours it at its step boundary (clients/python: take_hold).
  double hold_s = 0.0;
  int64_t hold_id = 0;
  // In a site: the trainer fails closed -- when it cannot hear the agent past valid_for_s it
  // holds at its step boundary instead of running on safe values (docs/SITE.md).
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
  // The controller's phase. "eval" is reported as kRollout with `eval` (below): an evaluation
  // generates on the same engines, where concurrency moves power as in a rollout.
  control::Phase phase = control::Phase::kRollout;
  double tokens = 0.0;    // tokens so far
  int in_flight = 0;      // sequences in flight
  double progress = 0.0;  // rollout progress, when the trainer knows it
  // The group size in force this step, when the trainer says (a new one applies from the next
  // step boundary); otherwise the agent takes its own last decision.
  std::optional<int> group_size;
  // How many rollout engines the in-flight count is over (default 1), and how the trainer's
  // adapter admits sequences: "continuous" or "chunked" (twin/scenario.h, `admission`).
  std::optional<int> engines;
  std::optional<std::string> admission;
  bool eval = false;  // reported as "eval" (the phase above is then kRollout)
};

// The phase as the trainer named it ("eval" included).
std::string_view ReportedPhaseName(const TrainerReport& r);

// Whether the trainer is heard: it never reported, its last report is within report_timeout_s,
// or it has been silent longer (taken as gone).
enum class TrainerPresence { kNever, kReporting, kSilent };
std::string_view TrainerPresenceName(TrainerPresence p);

// The trainer's values against the decisions (docs/TRAINERS.md, "Mismatch"). Each kind, once
// flagged, stays flagged; the numbers are those of the last report that showed it.
struct TrainerMismatch {
  bool group_size = false;
  int group_size_trainer = 0;  // the trainer's G
  int group_size_decided = 0;  // the decision's for that step
  bool in_flight = false;
  int in_flight_trainer = 0;  // sequences in flight, over all engines
  int in_flight_allowed = 0;  // concurrency x engines (or what a lowered cap still lets drain)
  bool admission = false;     // the trainer's adapter admits otherwise than the policy learned
  std::string admission_trainer, admission_policy;
  // The group size the decisions are pinned to (a trainer whose G never moved); none: not pinned.
  std::optional<int> pinned_group_size;
  bool any() const { return group_size || in_flight || admission; }
};

// What a step's first read fixed for every rank that asks for the same step (GET
// /v1/actuation?step=K): the group size and the hold.
struct StepDecision {
  int step = 0;
  int group_size = 0;
  double hold_s = 0.0;
  int64_t hold_id = 0;
};
inline constexpr size_t kStepDecisionsKeep = 64;

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
  TrainerPresence trainer = TrainerPresence::kNever;
  double last_report_unix_s = 0.0;  // wall clock of the last report; 0: none or not known
  TrainerMismatch mismatch;
  double max_hold_s = 0.0;
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
  // Fenced in a site (its lease not renewed in time): the power limit goes to
  // config.fenced_power_limit_w from the next decision on, while it lasts.
  void SetFenced(bool fenced) { fenced_ = fenced; }
  double budget_w() const { return budget_w_; }
  const std::string& budget_from() const { return budget_from_; }
  // A trainer report (or heartbeat) at agent time now_s (`unix_s`: the wall clock, 0: unknown).
  // `checked`: compared with the decisions (the mismatch); not for the twin's own reports, nor
  // for a trainer's shown beside the twin that is the trainer of record.
  void Report(const TrainerReport& report, double now_s, double unix_s = 0.0, bool checked = true);
  // The decision for trainer step `step`: the group size and hold fixed at the step's first
  // read (every rank asking for the step gets the same ones), the rest as now.
  Actuation ForStep(int step);
  TrainerPresence Presence(double now_s) const;
  const TrainerMismatch& mismatch() const { return mismatch_; }
  // Warnings since the last call (a mismatch found, the trainer gone or back), for the runner to
  // log outside the lock.
  std::vector<LogEvent> TakeWarnings();
  // The runner's measure of one decision's latency (it owns the clock).
  void RecordDecisionLatency(double seconds);
  // A write to the agent's trace or site log failed (a full disk): counted, the loop goes on.
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
  double report_unix_s_ = 0.0;
  bool was_silent_ = false;
  bool fenced_ = false;
  // The power limit in force: the controller's, or lower where a fence asks (fail closed).
  double LimitInForce(double controller_w) const;
  // While the trainer is silent with silent_power_limit: the controller's limit from before.
  std::optional<double> silence_limit_;
  // Mismatch: the trainer's group size per step boundary, and in-flight per report.
  TrainerMismatch mismatch_;
  int group_size_steps_differing_ = 0;  // step boundaries in a row whose G differs
  std::optional<int> last_boundary_step_;
  int in_flight_reports_over_ = 0;  // reports in a row past what is allowed
  // A lowered cap lets the sequences already running drain: in flight may fall to it but never
  // rise while above it; the allowance ends once in flight is at or under the cap, or
  // report_timeout_s after the cap was lowered.
  int drain_allowed_ = 0;  // 0: none
  double drain_since_s_ = 0.0;
  std::deque<StepDecision> step_decisions_;
  std::vector<LogEvent> warnings_;
  void CheckMismatch(const TrainerReport& report, double now_s);
  // Tick's steps: the sample taken (why not, empty when it was), the trainer's presence noted
  // (said when it changes), the windows scored, the decision for a silent trainer, the
  // controller's inputs (and the decision's reason), the power limit published.
  std::string ReadSample(double now_s, const Result<telemetry::Sample>& sample);
  TrainerPresence NotePresence(double now_s);
  void ScoreWindows(double now_s);
  void DecideSilent(double now_s);
  control::Inputs ControllerInputs(double now_s, bool fresh_report, std::string* reason) const;
  void PublishLimit();
  void Warn(std::string msg, std::vector<LogField> fields);
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
