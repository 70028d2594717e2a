#include "twin_link/twin_link.h"

#include "sim/episode.h"

namespace headroom::sim {

Result<telemetry::Sample> TwinLink::Read(double t_s) {
  const double tick_s = twin_.scenario().tick_s;
  while (twin_.t_s() + 0.5 * tick_s <= t_s) twin_.Tick();
  telemetry::Sample out;
  out.t_s = t_s;
  out.gpus.resize(static_cast<size_t>(gpus()));
  for (size_t g = 0; g < out.gpus.size(); ++g) {
    out.gpus[g].power_w = twin_.smoothed_w()[g];
    out.gpus[g].power_is_average = true;
    out.gpus[g].energy_j = twin_.energy_j() / gpus();  // the job's total, shared evenly
    // As NVML reads it: the limit in force, else the default one (the nameplate).
    out.gpus[g].power_limit_w =
        twin_.power_limit_w() > 0.0 ? twin_.power_limit_w() : twin_.scenario().nameplate_w;
  }
  return out;
}

agent::TrainerReport TwinLink::Report(double) {
  agent::TrainerReport r;
  r.step = twin_.steps_done();
  r.phase = twin_.current_phase();  // one vocabulary
  r.tokens = twin_.tokens_total();
  r.progress = twin_.rollout_progress();
  r.group_size = twin_.group_size();
  return r;
}

void TwinLink::Apply(const agent::Actuation& actuation) {
  twin_.SetConcurrency(actuation.concurrency);
  twin_.SetGroupSize(actuation.group_size);
  // The site's hold, as a trainer honours it at the step boundary (0 clears one not begun).
  twin_.HoldNextStep(actuation.hold_s);
  // Not admitted by its site: no step begins until it is (Twin::SetStandby).
  twin_.SetStandby(actuation.standby);
  // actuation.power_limit_w is not applied here: whoever owns the GPUs' limits does (the agent's
  // guard, or SetPowerLimit), as on real GPUs.
}

void TwinLink::FollowTrainer(const std::optional<agent::TrainerReport>& report, double) {
  if (report) {
    twin_.Follow(report->phase, report->step);
    // A trainer that says over how many engines its in-flight count is (the client's heartbeat)
    // drives the twin's rollout occupancy; one that does not leaves the twin its own rollout.
    twin_.FollowInFlight(
        report->engines
            ? std::optional<double>(static_cast<double>(report->in_flight) / *report->engines)
            : std::nullopt);
  } else {
    twin_.Follow(twin::Phase::kStartup, 0);  // the job loading, until its trainer reports
  }
}

agent::TrainerState TwinLink::State() const {
  return {std::string(twin::PhaseName(twin_.phase())), twin_.steps_done(), twin_.tokens_total()};
}

}  // namespace headroom::sim
