#include "agent/runner.h"

#include <fmt/format.h>

#include "sim/episode.h"

namespace headroom::agent {
RunSummary Run(telemetry::Source& source, telemetry::TwinSource* twin, Shared& shared,
               Recorder* recorder, const RunnerOptions& options, const Clock& clock,
               const std::atomic<bool>& stop, const std::function<void(const std::string&)>& log) {
  RunSummary summary;
  for (uint64_t k = 0;; ++k) {
    const double t_s = static_cast<double>(k) * options.interval_s;
    if (stop.load() || (options.duration_s && t_s > *options.duration_s + 1e-9)) break;
    clock.sleep_until(t_s);
    const double started_s = options.monotonic_s ? options.monotonic_s() : 0.0;
    Result<telemetry::Sample> sample = source.Read(t_s);
    for (const std::string& w : source.TakeWarnings()) log(w);
    Actuation a;
    {
      std::lock_guard lock(shared.mu);
      if (twin != nullptr) {
        const twin::Twin& tw = twin->twin();
        TrainerReport r;
        r.step = tw.steps_done();
        r.phase = sim::ToControlPhase(tw.current_phase());
        r.tokens = tw.tokens_total();
        r.progress = tw.rollout_progress();
        r.group_size = tw.group_size();
        shared.agent->Report(r, t_s);
      }
      a = shared.agent->Tick(t_s, sample);
    }
    shared.NotifyDecision();
    if (options.monotonic_s) {
      const double latency_s = options.monotonic_s() - started_s;
      std::lock_guard lock(shared.mu);
      shared.agent->RecordDecisionLatency(latency_s);
    }
    if (!sample.ok()) {
      ++summary.telemetry_errors;
      log(fmt::format("telemetry: {} -> safe actuation", sample.error().message()));
    }
    if (options.observe && sample.ok()) options.observe(*sample);
    if (twin != nullptr) {
      twin->SetConcurrency(a.concurrency);
      twin->SetGroupSize(a.group_size);
    }
    if (recorder != nullptr && sample.ok()) {
      std::vector<double> power;
      for (const auto& g : sample->gpus) power.push_back(g.power_w.value_or(0.0));
      std::string phase = "idle";
      int step = 0;
      double tokens_total = 0.0;
      if (twin != nullptr) {
        phase = std::string(twin::PhaseName(twin->twin().phase()));
        step = twin->twin().steps_done();
        tokens_total = twin->twin().tokens_total();
      } else {
        std::lock_guard lock(shared.mu);
        if (const auto& report = shared.agent->report()) {
          phase = std::string(control::PhaseName(report->phase));
          step = report->step;
          tokens_total = report->tokens;
        }
      }
      recorder->Write(t_s, power, phase, step, tokens_total, a.concurrency, a.group_size);
      recorder->MaybeFlush(t_s);
    }
    summary.duration_s = t_s;
    ++summary.intervals;
  }
  if (recorder != nullptr) recorder->MaybeFlush(summary.duration_s, /*force=*/true);
  return summary;
}

}  // namespace headroom::agent
