// The digital twin as the agent's telemetry and trainer at once: advanced to the agent's clock,
// read as a telemetry source (power is the twin's telemetry view, a 1 s moving average like
// NVML's averaged field), and driven by the agent's decisions as a trainer would apply them,
// reporting its phase, step, progress, tokens and group size before each decision. The whole
// loop with no GPU; `headroom agent --source twin`. It lives with the simulator so that the
// agent library links none of it.
#pragma once

#include <cstdint>

#include "agent/trainer_link.h"
#include "telemetry/source.h"
#include "twin/twin.h"

namespace headroom::sim {

class TwinLink final : public telemetry::Source, public agent::TrainerLink {
 public:
  // follows_trainer: the twin's phases and steps are an external trainer's (Twin::Follow,
  // `--twin-follows-trainer`); its power is still simulated, at the decided actuation.
  TwinLink(const twin::Scenario& scenario, uint64_t seed, bool follows_trainer = false)
      : twin_(scenario, seed), follows_trainer_(follows_trainer) {}

  // telemetry::Source
  std::string_view name() const override { return "twin"; }
  int gpus() const override { return twin_.scenario().gpus; }
  // Advances the twin tick by tick until its time reaches t_s, then reads it.
  Result<telemetry::Sample> Read(double t_s) override;

  // agent::TrainerLink
  agent::TrainerReport Report(double t_s) override;
  void Apply(const agent::Actuation& actuation) override;
  agent::TrainerState State() const override;
  bool follows_trainer() const override { return follows_trainer_; }
  // Until the trainer's first report the twin stays in its startup (the job loading).
  void FollowTrainer(const std::optional<agent::TrainerReport>& report, double t_s) override;

  const twin::Twin& twin() const { return twin_; }
  // The hardware power limit per GPU (a controller's, or fleet-sim's without job control);
  // <= 0: none.
  double SetPowerLimit(double per_gpu_w) { return twin_.SetPowerLimit(per_gpu_w); }
  // A site's hold before the next step (Twin::HoldNextStep), as a trainer honours hold_s.
  double HoldNextStep(double hold_s) { return twin_.HoldNextStep(hold_s); }

 private:
  twin::Twin twin_;
  const bool follows_trainer_;
};

}  // namespace headroom::sim
