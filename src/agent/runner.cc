#include "agent/runner.h"

#include <fmt/format.h>

namespace headroom::agent {
RunSummary Run(telemetry::Source& source, TrainerLink* link, Shared& shared, Recorder* recorder,
               const RunnerOptions& options, const Clock& clock, const std::atomic<bool>& stop,
               const Logger& log) {
  RunSummary summary;
  // A failure that repeats (a replay past its end, a GPU that stays lost) is logged once, with
  // the count when it changes or ends.
  std::string failing;
  uint64_t repeats = 0;
  const auto end_failure = [&](bool back) {
    if (failing.empty()) return;
    if (repeats > 0) {
      log.Warn(fmt::format("telemetry: the same failure {} more time(s)", repeats),
               {{"repeats", repeats}});
    }
    if (back) log.Info("telemetry: back");
    failing.clear();
    repeats = 0;
  };
  // The trace's failed writes: said once, each counted where /metrics reads it; the control
  // loop goes on without its trace.
  const auto note_trace_errors = [&] {
    if (recorder == nullptr || recorder->write_errors() == summary.trace_write_errors) return;
    if (summary.trace_write_errors == 0) {
      log.Error(
          fmt::format("trace: cannot write the agent trace: {} (the control loop goes on; "
                      "headroom_trace_write_errors_total counts the failed writes)",
                      recorder->first_error()));
    }
    {
      MutexLock lock(shared.mu);
      for (uint64_t n = summary.trace_write_errors; n < recorder->write_errors(); ++n) {
        shared.agent->NoteTraceWriteError();
      }
    }
    summary.trace_write_errors = recorder->write_errors();
  };
  for (uint64_t k = 0;; ++k) {
    const double t_s = static_cast<double>(k) * options.interval_s;
    if (stop.load() || (options.duration_s && t_s > *options.duration_s + 1e-9)) break;
    clock.sleep_until(t_s);
    if (stop.load()) break;  // the sleep ends early on a stop
    const double started_s = options.monotonic_s ? options.monotonic_s() : 0.0;
    if (link != nullptr && link->follows_trainer()) {
      std::optional<TrainerReport> report;
      {
        MutexLock lock(shared.mu);
        report = shared.agent->report();
      }
      link->FollowTrainer(report, t_s);
    }
    Result<telemetry::Sample> sample = source.Read(t_s);
    for (const std::string& w : source.TakeWarnings()) log.Warn(w);
    Actuation a;
    double budget_w = 0.0;
    std::vector<LogEvent> warnings;  // the agent's, logged outside the lock
    {
      std::optional<BudgetInForce> budget;
      if (options.budget != nullptr) budget = options.budget->Current(t_s);
      MutexLock lock(shared.mu);
      if (budget && (budget->budget_per_gpu_w != shared.agent->budget_w() ||
                     budget->from != shared.agent->budget_from())) {
        shared.agent->SetBudget(budget->budget_per_gpu_w, budget->from);
        log.Info(fmt::format("budget {:.1f} W per GPU from {} at t={:.1f} s",
                             budget->budget_per_gpu_w, budget->from, t_s),
                 {{"budget_per_gpu_w", budget->budget_per_gpu_w}, {"from", budget->from}});
      }
      if (budget) {
        shared.agent->SetHold(budget->hold_s, budget->hold_id);
        shared.agent->SetSite(budget->site, budget->standby);
        shared.agent->SetFenced(budget->fenced);
      }
      budget_w = shared.agent->budget_w();
      if (link != nullptr && !link->follows_trainer()) {
        shared.agent->Report(link->Report(t_s), t_s, 0.0, /*checked=*/false);
      }
      a = shared.agent->Tick(t_s, sample, options.unix_s ? options.unix_s() : 0.0);
      warnings = shared.agent->TakeWarnings();
    }
    for (const LogEvent& w : warnings) log(w);
    shared.NotifyDecision();
    if (options.monotonic_s) {
      const double latency_s = options.monotonic_s() - started_s;
      MutexLock lock(shared.mu);
      shared.agent->RecordDecisionLatency(latency_s);
    }
    if (!sample.ok()) {
      ++summary.telemetry_errors;
      const std::string& message = sample.error().message();
      if (message == failing) {
        ++repeats;
      } else {
        end_failure(/*back=*/false);
        log.Warn(fmt::format("telemetry: {} -> safe actuation", message));
        failing = message;
      }
    } else if (!failing.empty()) {
      end_failure(/*back=*/true);
    }
    if (options.observe && sample.ok()) options.observe(*sample, budget_w);
    if (options.power_limit) options.power_limit(a.power_limit_w);
    if (link != nullptr) link->Apply(a);
    if (recorder != nullptr && sample.ok()) {
      std::vector<double> power;
      for (const auto& g : sample->gpus) power.push_back(g.power_w.value_or(0.0));
      TrainerState state;
      if (link != nullptr) {
        state = link->State();
      } else {
        MutexLock lock(shared.mu);
        if (const auto& report = shared.agent->report()) {
          state = {std::string(control::PhaseName(report->phase)), report->step, report->tokens};
        }
      }
      recorder->Write(t_s, power, state.phase, state.step, state.tokens_total, a.concurrency,
                      a.group_size, budget_w);
      recorder->MaybeFlush(t_s);
      note_trace_errors();
    }
    summary.duration_s = t_s;
    ++summary.intervals;
  }
  end_failure(/*back=*/false);
  if (recorder != nullptr) recorder->MaybeFlush(summary.duration_s, /*force=*/true);
  note_trace_errors();
  return summary;
}

}  // namespace headroom::agent
