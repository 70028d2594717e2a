// What `headroom agent` takes from the twin, behind plain values: a scenario's envelope and
// facts (--scenario), and the twin as a telemetry source (--source twin). The agent's command
// includes this, not sim/ or twin/ (src/README.md: the daemons free of the simulator).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "agent/trainer_link.h"
#include "common/error.h"
#include "control/policy.h"
#include "telemetry/source.h"

namespace headroom::cli {

// The agent's default scenario when the twin runs without --scenario.
inline constexpr const char* kDefaultTwinScenario = "a100-7b-tp1";

// A scenario as the agent uses it (per GPU).
struct AgentScenario {
  control::PolicyEnvelope envelope;  // its ranges, defaults and budgets
  std::string gpu_model;
  double floor_w = 0.0;        // the job's power at its lowest actuation
  double idle_loaded_w = 0.0;  // standby: idle with the model loaded
  double update_w = 0.0;       // its update's power at full clocks: log-probs or training
};

// A built-in scenario or a TOML file; refused when it has no rollout to steer.
Result<AgentScenario> LoadAgentScenario(const std::string& name_or_path);

// The twin of `scenario` as the agent's telemetry source and in-process trainer.
struct AgentTwin {
  std::unique_ptr<telemetry::Source> source;
  agent::TrainerLink* link = nullptr;                     // in `source`
  std::function<void(double limit_per_gpu_w)> set_limit;  // the twin's GPUs' power limit
  std::function<double()> energy_j;                       // its true energy so far
};
// In a site the twin's trainer loads for at least a second before asking for its first step.
Result<AgentTwin> MakeAgentTwin(const std::string& scenario, uint64_t seed, bool follows_trainer,
                                bool in_site);

}  // namespace headroom::cli
