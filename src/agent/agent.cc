#include "agent/agent.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>

namespace headroom::agent {

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

const Actuation& Agent::Tick(double now_s, const Result<telemetry::Sample>& sample, double unix_s) {
  ++decisions_;
  std::string failure;
  if (!sample.ok()) {
    failure = sample.error().message();
  } else if (now_s - sample->t_s > config_.stale_after_s) {
    failure = fmt::format("telemetry is {:.1f} s old", now_s - sample->t_s);
  } else {
    std::vector<double> power;
    for (const auto& g : sample->gpus) {
      if (!g.power_w || !std::isfinite(*g.power_w)) {
        failure = "telemetry has no power for every GPU";
        break;
      }
      power.push_back(*g.power_w);
    }
    if (failure.empty() && power.empty()) failure = "telemetry has no GPU";
    if (failure.empty()) {
      power_w_ = std::move(power);
      power_limit_w_.clear();
      for (const auto& g : sample->gpus) {
        power_limit_w_.push_back(
            g.power_limit_w && std::isfinite(*g.power_limit_w) ? g.power_limit_w : std::nullopt);
      }
      last_good_s_ = now_s;
    }
  }
  // The trainer's step, when a fresh report says it: group size changes only then.
  const bool fresh_report = report_ && now_s - report_t_s_ <= config_.report_timeout_s;
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
  double job_w = 0.0;
  for (double p : power_w_) job_w += p / static_cast<double>(power_w_.size());
  // The budget in force from this decision on, as the windows score it; what no open window
  // needs any more is forgotten.
  budgets_.Append(now_s, budget_w_);
  if (budgets_.points().size() > 64) budgets_.DropBefore(now_s - 2.0 * kWindowsS.back());
  for (auto& s : stats_) s.Add(now_s, job_w);
  saw_sample_ = true;

  control::Inputs in;
  in.t_s = now_s;
  in.interval_s = config_.interval_s;
  in.budget_w = budget_w_;
  in.smoothed_power_w = power_w_;
  in.concurrency = applied_.concurrency;
  in.group_size = applied_.group_size;
  in.next_group_size = applied_.group_size;
  in.power_limit_w = applied_.power_limit_w;
  std::string reason;
  if (fresh_report) {
    in.phase = report_->phase;
    in.step = report_->step;
    in.tokens_total = report_->tokens;
    in.rollout_progress = report_->progress;
    if (report_->group_size) in.group_size = *report_->group_size;
    reason =
        fmt::format("{}: {} at step {}", controller_.name(), control::PhaseName(in.phase), in.step);
  } else {
    in.phase = control::Phase::kRollout;  // on power alone
    reason = fmt::format("{}: on power alone (no trainer report)", controller_.name());
  }
  if (config_.floor_w && budget_w_ < *config_.floor_w) {
    reason += fmt::format("; the budget {:.1f} W is below the job's floor {:.1f} W per GPU",
                          budget_w_, *config_.floor_w);
  }
  applied_ = control::ApplyLimits(config_.limits, applied_, controller_.Decide(in));
  applied_.group_size = group_gate_.Decide(actuation_.group_size, applied_.group_size, step);
  if (applied_.power_limit_w != actuation_.power_limit_w) {
    actuation_.power_limit_w = applied_.power_limit_w;
    ++actuation_.seq;
  }
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

void Agent::Report(const TrainerReport& report, double now_s) {
  if (report_ && now_s > report_t_s_ && report.tokens >= tokens_at_report_) {
    tokens_per_s_ = (report.tokens - tokens_at_report_) / (now_s - report_t_s_);
  }
  if (report.group_size) group_gate_.Confirm(report.step, *report.group_size);
  report_ = report;
  report_t_s_ = now_s;
  ++reports_;
  tokens_at_report_ = report.tokens;
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
  s.concurrency_at_minimum = actuation_.concurrency <= config_.limits.concurrency.lo;
  s.budget_below_floor = config_.floor_w && budget_w_ < *config_.floor_w;
  s.group_size_changes = group_gate_.changes();
  s.group_size_changed_at_step = group_gate_.changed_at_step();
  s.tokens_per_s = tokens_per_s_;
  s.latency_samples = latency_samples_;
  s.latency_sum_s = latency_sum_s_;
  if (!latency_s_.empty()) {
    std::vector<double> v = latency_s_;
    // Nearest rank: the smallest value with at least q of the samples at or below it.
    auto quantile = [&v](double q) {
      const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
      const size_t k = std::clamp<size_t>(rank, 1, v.size()) - 1;
      std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
      return v[k];
    };
    s.decision_p50_s = quantile(0.50);
    s.decision_p99_s = quantile(0.99);
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
