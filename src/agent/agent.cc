#include "agent/agent.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>

#include "common/stats.h"

namespace headroom::agent {

std::string_view ReportedPhaseName(const TrainerReport& r) {
  return r.eval ? std::string_view("eval") : control::PhaseName(r.phase);
}

std::string_view TrainerPresenceName(TrainerPresence p) {
  switch (p) {
    case TrainerPresence::kNever:
      return "never";
    case TrainerPresence::kReporting:
      return "reporting";
    case TrainerPresence::kSilent:
      return "silent";
  }
  return "?";
}

Agent::Agent(AgentConfig config, control::Controller& controller)
    : config_(config),
      controller_(controller),
      group_gate_(config.group_size_rule),
      budget_w_(config.budget_w),
      budget_from_(config.budget_from),
      stats_{analysis::WindowStats(kWindowsS[0], &budgets_),
             analysis::WindowStats(kWindowsS[1], &budgets_),
             analysis::WindowStats(kWindowsS[2], &budgets_)} {
  assert(config_.budget_w > 0.0 && config_.interval_s > 0.0);
  const bool initial = config_.initial_concurrency || config_.initial_group_size;
  applied_.concurrency = config_.initial_concurrency.value_or(config_.safe_concurrency);
  applied_.group_size = config_.initial_group_size.value_or(config_.safe_group_size);
  controller_.Reset();
  Set(applied_.concurrency, applied_.group_size,
      initial ? "starting: initial values" : "starting: safe values", 0.0);
}

void Agent::Set(int concurrency, int group_size, std::string reason, double now_s) {
  if (concurrency < actuation_.concurrency) {
    // A lowered cap: what already runs may drain (CheckMismatch).
    const int engines = report_ && report_->engines ? *report_->engines : 1;
    drain_allowed_ = std::max(drain_allowed_, actuation_.concurrency * engines);
    drain_since_s_ = now_s;
  }
  const bool changed = concurrency != actuation_.concurrency ||
                       group_size != actuation_.group_size || reason != actuation_.reason;
  actuation_.concurrency = concurrency;
  actuation_.group_size = group_size;
  actuation_.valid_for_s = config_.valid_for_s;
  actuation_.t_s = now_s;
  actuation_.reason = std::move(reason);
  if (changed) ++actuation_.seq;
}

void Agent::SetHold(double hold_s, int64_t hold_id) {
  if (!(hold_s > 0.0) || !std::isfinite(hold_s)) hold_s = 0.0, hold_id = 0;
  hold_s = std::min(hold_s, config_.max_hold_s);
  if (hold_s == actuation_.hold_s && hold_id == actuation_.hold_id) return;
  actuation_.hold_s = hold_s;
  actuation_.hold_id = hold_id;
  ++actuation_.seq;
}

void Agent::SetSite(bool site, bool standby) {
  if (site == actuation_.site && standby == actuation_.standby) return;
  actuation_.site = site;
  actuation_.standby = standby;
  ++actuation_.seq;
}

void Agent::SetBudget(double budget_w, std::string from) {
  assert(budget_w > 0.0 && std::isfinite(budget_w));
  budget_w_ = budget_w;
  budget_from_ = std::move(from);
}

std::string Agent::ReadSample(double now_s, const Result<telemetry::Sample>& sample) {
  if (!sample.ok()) return sample.error().message();
  if (now_s - sample->t_s > config_.stale_after_s) {
    return fmt::format("telemetry is {:.1f} s old", now_s - sample->t_s);
  }
  std::vector<double> power;
  for (const auto& g : sample->gpus) {
    if (!g.power_w || !std::isfinite(*g.power_w)) return "telemetry has no power for every GPU";
    power.push_back(*g.power_w);
  }
  if (power.empty()) return "telemetry has no GPU";
  power_w_ = std::move(power);
  power_limit_w_.clear();
  for (const auto& g : sample->gpus) {
    power_limit_w_.push_back(g.power_limit_w && std::isfinite(*g.power_limit_w) ? g.power_limit_w
                                                                                : std::nullopt);
  }
  last_good_s_ = now_s;
  return {};
}

TrainerPresence Agent::NotePresence(double now_s) {
  const TrainerPresence presence = Presence(now_s);
  if (presence == TrainerPresence::kSilent && !was_silent_) {
    was_silent_ = true;
    Warn(fmt::format("trainer: no report for {:.1f} s (--report-timeout-s {:g}): taken as gone, "
                     "safe actuation{}",
                     now_s - report_t_s_, config_.report_timeout_s,
                     config_.silent_power_limit ? " and the budget as the power limit" : ""),
         {{"silent_s", now_s - report_t_s_}, {"report_timeout_s", config_.report_timeout_s}});
  } else if (presence == TrainerPresence::kReporting && was_silent_) {
    was_silent_ = false;
    // The limit the silence imposed goes; the controller's from before it is back.
    if (silence_limit_) applied_.power_limit_w = *silence_limit_;
    silence_limit_.reset();
    warnings_.push_back({LogLevel::kInfo, "trainer: reporting again, the controller steers", {}});
  }
  return presence;
}

void Agent::ScoreWindows(double now_s) {
  double job_w = 0.0;
  for (double p : power_w_) job_w += p / static_cast<double>(power_w_.size());
  // The budget in force from this decision on, as the windows score it; what no open window
  // needs any more is forgotten.
  budgets_.Append(now_s, budget_w_);
  if (budgets_.points().size() > 64) budgets_.DropBefore(now_s - 2.0 * kWindowsS.back());
  for (auto& s : stats_) s.Add(now_s, job_w);
  saw_sample_ = true;
}

void Agent::PublishLimit() {
  if (const double w = LimitInForce(applied_.power_limit_w); w != actuation_.power_limit_w) {
    actuation_.power_limit_w = w;
    ++actuation_.seq;
  }
}

void Agent::DecideSilent(double now_s) {
  // The trainer is gone (or stuck): nothing it does is known, so nothing is steered.
  ++safe_decisions_;
  applied_.concurrency = config_.safe_concurrency;
  // No step is known: the group size stays (a trainer that comes back mid-step keeps it).
  applied_.group_size = actuation_.group_size;
  // Fail closed: a limit the controller set stays (never lifted for a trainer's silence);
  // with the guard, the budget is the limit unless one lower holds.
  if (config_.silent_power_limit) {
    if (!silence_limit_) silence_limit_ = applied_.power_limit_w;
    const double held_w = *silence_limit_;
    applied_.power_limit_w = held_w > 0.0 ? std::min(held_w, budget_w_) : budget_w_;
  }
  PublishLimit();
  Set(applied_.concurrency, applied_.group_size,
      fmt::format("safe: the trainer has not reported for {:.0f} s (--report-timeout-s {:g})",
                  now_s - report_t_s_, config_.report_timeout_s),
      now_s);
}

control::Inputs Agent::ControllerInputs(double now_s, bool fresh_report,
                                        std::string* reason) const {
  control::Inputs in;
  in.t_s = now_s;
  in.interval_s = config_.interval_s;
  in.budget_w = budget_w_;
  in.smoothed_power_w = power_w_;
  in.concurrency = applied_.concurrency;
  in.group_size = applied_.group_size;
  in.next_group_size = applied_.group_size;
  in.power_limit_w = applied_.power_limit_w;
  if (fresh_report) {
    in.phase = report_->phase;
    in.step = report_->step;
    in.tokens_total = report_->tokens;
    in.rollout_progress = report_->progress;
    if (report_->group_size) in.group_size = *report_->group_size;
    // A trainer that does not apply the decisions: the controller sees what it does.
    if (mismatch_.group_size && report_->group_size) in.next_group_size = *report_->group_size;
    if (mismatch_.in_flight && in.phase == control::Phase::kRollout) {
      const int engines = report_->engines.value_or(1);
      in.concurrency = std::max(1, (report_->in_flight + engines - 1) / engines);
    }
    *reason =
        fmt::format("{}: {} at step {}", controller_.name(), ReportedPhaseName(*report_), in.step);
  } else {
    in.phase = control::Phase::kRollout;  // on power alone
    *reason = fmt::format("{}: on power alone (no trainer report)", controller_.name());
  }
  if (config_.floor_w && budget_w_ < *config_.floor_w) {
    *reason += fmt::format("; the budget {:.1f} W is below the job's floor {:.1f} W per GPU",
                           budget_w_, *config_.floor_w);
  }
  return in;
}

const Actuation& Agent::Tick(double now_s, const Result<telemetry::Sample>& sample, double unix_s) {
  ++decisions_;
  const std::string failure = ReadSample(now_s, sample);
  // The trainer's step, when a report stands (its last, within report_timeout_s): group size
  // changes only then.
  const TrainerPresence presence = NotePresence(now_s);
  const bool fresh_report = presence == TrainerPresence::kReporting;
  const std::optional<int> step = fresh_report ? std::optional<int>(report_->step) : std::nullopt;
  const std::optional<control::Phase> phase =
      fresh_report ? std::optional<control::Phase>(report_->phase) : std::nullopt;
  if (!failure.empty()) {
    ++telemetry_errors_;
    ++safe_decisions_;
    applied_.concurrency = config_.safe_concurrency;
    applied_.group_size = group_gate_.Decide(actuation_.group_size, config_.safe_group_size, step);
    Set(config_.safe_concurrency, applied_.group_size, "safe: " + failure, now_s);
    Remember(now_s, /*good=*/false, unix_s, phase);
    return actuation_;
  }
  ScoreWindows(now_s);
  if (presence == TrainerPresence::kSilent) {
    DecideSilent(now_s);
    Remember(now_s, /*good=*/true, unix_s, phase);
    return actuation_;
  }
  std::string reason;
  const control::Inputs in = ControllerInputs(now_s, fresh_report, &reason);
  applied_ = control::ApplyLimits(config_.limits, applied_, controller_.Decide(in));
  applied_.group_size = group_gate_.Decide(actuation_.group_size, applied_.group_size, step);
  if (mismatch_.pinned_group_size) applied_.group_size = *mismatch_.pinned_group_size;
  PublishLimit();
  Set(applied_.concurrency, applied_.group_size, std::move(reason), now_s);
  Remember(now_s, /*good=*/true, unix_s, phase);
  return actuation_;
}

void Agent::Remember(double now_s, bool good, double unix_s, std::optional<control::Phase> phase) {
  HistoryPoint p;
  if (history_.size() == kHistoryKeep) {
    p = std::move(history_.front());  // reuse its storage
    history_.pop_front();
  }
  p.t_s = now_s;
  if (good) {
    p.power_w.assign(power_w_.begin(), power_w_.end());
    p.power_limit_w.assign(power_limit_w_.begin(), power_limit_w_.end());
  } else {
    p.power_w.clear();
    p.power_limit_w.clear();
  }
  p.unix_s = unix_s;
  p.phase = phase;
  p.budget_w = budget_w_;
  p.concurrency = actuation_.concurrency;
  p.group_size = actuation_.group_size;
  p.tokens_per_s = tokens_per_s_;
  history_.push_back(std::move(p));
}

std::vector<HistoryPoint> Agent::History(double after_t_s) const {
  auto first = std::upper_bound(history_.begin(), history_.end(), after_t_s,
                                [](double t, const HistoryPoint& p) { return t < p.t_s; });
  return {first, history_.end()};
}

void Agent::Report(const TrainerReport& report, double now_s, double unix_s, bool checked) {
  if (report_ && now_s > report_t_s_ && report.tokens >= tokens_at_report_) {
    tokens_per_s_ = (report.tokens - tokens_at_report_) / (now_s - report_t_s_);
  }
  if (report.group_size) group_gate_.Confirm(report.step, *report.group_size);
  if (checked) CheckMismatch(report, now_s);
  report_ = report;
  report_t_s_ = now_s;
  report_unix_s_ = unix_s;
  ++reports_;
  tokens_at_report_ = report.tokens;
}

double Agent::LimitInForce(double controller_w) const {
  if (!fenced_ || !(config_.fenced_power_limit_w > 0.0)) return controller_w;
  return controller_w > 0.0 ? std::min(controller_w, config_.fenced_power_limit_w)
                            : config_.fenced_power_limit_w;
}

TrainerPresence Agent::Presence(double now_s) const {
  if (!report_) return TrainerPresence::kNever;
  return now_s - report_t_s_ <= config_.report_timeout_s ? TrainerPresence::kReporting
                                                         : TrainerPresence::kSilent;
}

void Agent::Warn(std::string msg, std::vector<LogField> fields) {
  warnings_.push_back({LogLevel::kWarn, std::move(msg), std::move(fields)});
}

std::vector<LogEvent> Agent::TakeWarnings() {
  std::vector<LogEvent> out;
  out.swap(warnings_);
  return out;
}

Actuation Agent::ForStep(int step) {
  auto it = std::find_if(step_decisions_.begin(), step_decisions_.end(),
                         [step](const StepDecision& d) { return d.step == step; });
  if (it == step_decisions_.end()) {
    if (step_decisions_.size() == kStepDecisionsKeep) step_decisions_.pop_front();
    step_decisions_.push_back({step, actuation_.group_size, actuation_.hold_s, actuation_.hold_id});
    it = std::prev(step_decisions_.end());
  }
  Actuation a = actuation_;
  a.group_size = it->group_size;
  a.hold_s = it->hold_s;
  a.hold_id = it->hold_id;
  return a;
}

void Agent::CheckMismatch(const TrainerReport& report, double now_s) {
  // Group size, at each step boundary (the step's first report): against what the step's first
  // read fixed, else the decision now. One step off is a race (a decision made between the
  // trainer's read and its report); two in a row is a trainer that does not apply it.
  const bool boundary = !last_boundary_step_ || report.step != *last_boundary_step_;
  if (boundary) last_boundary_step_ = report.step;
  if (boundary && report.group_size) {
    const int trainer_g = *report.group_size;
    if (mismatch_.pinned_group_size && trainer_g != *mismatch_.pinned_group_size) {
      warnings_.push_back(
          {LogLevel::kInfo,
           fmt::format("trainer: its group size moved ({} -> {}): the decisions are no longer "
                       "pinned to it",
                       *mismatch_.pinned_group_size, trainer_g),
           {{"group_size_trainer", trainer_g}}});
      mismatch_.pinned_group_size.reset();
      group_size_steps_differing_ = 0;
    }
    int decided = actuation_.group_size;
    for (const auto& d : step_decisions_) {
      if (d.step == report.step) decided = d.group_size;
    }
    group_size_steps_differing_ = trainer_g != decided ? group_size_steps_differing_ + 1 : 0;
    if (group_size_steps_differing_ >= 2 && !mismatch_.pinned_group_size) {
      mismatch_.group_size = true;
      mismatch_.group_size_trainer = trainer_g;
      mismatch_.group_size_decided = decided;
      mismatch_.pinned_group_size = trainer_g;
      Warn(fmt::format("trainer mismatch: its group size is {} at step {} but the decision is {} "
                       "(2 step boundaries in a row): the decisions keep {} from now on",
                       trainer_g, report.step, decided, trainer_g),
           {{"kind", "group_size"},
            {"group_size_trainer", trainer_g},
            {"group_size_decided", decided},
            {"step", report.step}});
    }
  }
  // In flight, at every report: at most concurrency x engines or, after the cap was lowered, no
  // more than what was already running (it may only drain).
  const int engines = report.engines.value_or(1);
  const int cap = actuation_.concurrency * engines;
  int allowed = cap;
  if (drain_allowed_ > 0) {
    if (now_s - drain_since_s_ > config_.report_timeout_s || report.in_flight <= cap) {
      drain_allowed_ = 0;
    } else {
      allowed = std::max(cap, drain_allowed_);
      drain_allowed_ = std::max(cap, std::min(drain_allowed_, report.in_flight));
    }
  }
  in_flight_reports_over_ = report.in_flight > allowed ? in_flight_reports_over_ + 1 : 0;
  if (in_flight_reports_over_ >= 2) {
    const bool first = !mismatch_.in_flight;
    mismatch_.in_flight = true;
    mismatch_.in_flight_trainer = report.in_flight;
    mismatch_.in_flight_allowed = allowed;
    if (first) {
      Warn(fmt::format("trainer mismatch: {} sequences in flight but concurrency {} x {} "
                       "engine{} allows {} (2 reports in a row): the controller sees the "
                       "trainer's in-flight from now on",
                       report.in_flight, actuation_.concurrency, engines, engines == 1 ? "" : "s",
                       allowed),
           {{"kind", "in_flight"},
            {"in_flight_trainer", report.in_flight},
            {"in_flight_allowed", allowed},
            {"concurrency", actuation_.concurrency},
            {"engines", engines}});
    }
  }
  // Admission: a policy learned one way of admitting sequences.
  if (report.admission && config_.policy_admission &&
      *report.admission != *config_.policy_admission && !mismatch_.admission) {
    mismatch_.admission = true;
    mismatch_.admission_trainer = *report.admission;
    mismatch_.admission_policy = *config_.policy_admission;
    Warn(fmt::format("trainer mismatch: its adapter admits sequences '{}' but the policy was "
                     "trained for '{}' (docs/TRAINERS.md): its decisions are off what it learned",
                     *report.admission, *config_.policy_admission),
         {{"kind", "admission"},
          {"admission_trainer", *report.admission},
          {"admission_policy", *config_.policy_admission}});
  }
}

void Agent::RecordDecisionLatency(double seconds) {
  if (latency_s_.size() < kLatencyKeep) {
    latency_s_.push_back(seconds);
  } else {
    latency_s_[latency_samples_ % kLatencyKeep] = seconds;
  }
  ++latency_samples_;
  latency_sum_s_ += seconds;
}

AgentStatus Agent::Status(double now_s) const {
  AgentStatus s;
  s.t_s = now_s;
  s.budget_w = budget_w_;
  s.budget_from = budget_from_;
  s.floor_w = config_.floor_w;
  s.gpus = static_cast<int>(power_w_.size());
  s.power_w = power_w_;
  s.power_limit_w = power_limit_w_;
  for (double p : power_w_) s.job_power_w += p / static_cast<double>(power_w_.size());
  s.actuation = actuation_;
  s.decisions = decisions_;
  s.telemetry_errors = telemetry_errors_;
  s.trace_write_errors = trace_write_errors_;
  s.safe_decisions = safe_decisions_;
  s.report = report_;
  s.report_age_s = report_ ? now_s - report_t_s_ : -1.0;
  s.reports = reports_;
  s.trainer = Presence(now_s);
  s.last_report_unix_s = report_unix_s_;
  s.mismatch = mismatch_;
  s.max_hold_s = config_.max_hold_s;
  s.concurrency_at_minimum = actuation_.concurrency <= config_.limits.concurrency.lo;
  s.budget_below_floor = config_.floor_w && budget_w_ < *config_.floor_w;
  s.group_size_changes = group_gate_.changes();
  s.group_size_changed_at_step = group_gate_.changed_at_step();
  s.tokens_per_s = tokens_per_s_;
  s.latency_samples = latency_samples_;
  s.latency_sum_s = latency_sum_s_;
  if (!latency_s_.empty()) {
    std::vector<double> v = latency_s_;
    s.decision_p50_s = QuantileNearestRank(v, 0.50);
    s.decision_p99_s = QuantileNearestRank(v, 0.99);
    s.decision_max_s = *std::max_element(v.begin(), v.end());
  }
  for (size_t i = 0; i < stats_.size(); ++i) {
    // Windows decided so far (the open one is not counted until it closes).
    s.windows[i] = stats_[i].counted();
    s.windows_over[i] = stats_[i].over_budget();
    if (stats_[i].counted() > 0) {
      s.violation_fraction[i] =
          static_cast<double>(stats_[i].over_budget()) / static_cast<double>(stats_[i].counted());
    }
  }
  return s;
}

}  // namespace headroom::agent
