// A trainer the agent talks to in process, beside the HTTP API: before each decision it reports
// where it is, after it the decision is applied to it. A real trainer needs none (it reports and
// follows over HTTP); the digital twin is one (twin_link/twin_link.h), which keeps the agent
// library free of the simulator.
#pragma once

#include <optional>
#include <string>

#include "agent/agent.h"

namespace headroom::agent {

// What the agent's trace records of the trainer for one interval.
struct TrainerState {
  std::string phase = "idle";  // the trainer's own phase name
  int step = 0;
  double tokens_total = 0.0;
};

class TrainerLink {
 public:
  virtual ~TrainerLink() = default;
  // The trainer's report right before the decision at agent time t_s.
  virtual TrainerReport Report(double t_s) = 0;
  // The decision, applied as the trainer would apply it.
  virtual void Apply(const Actuation& actuation) = 0;
  // For the trace, after the decision.
  virtual TrainerState State() const = 0;
  // A link that follows a trainer outside the process (it reports over HTTP): before each
  // decision it is given the agent's last report instead of giving one (Report is not called).
  virtual bool follows_trainer() const { return false; }
  virtual void FollowTrainer(const std::optional<TrainerReport>& /*report*/, double /*t_s*/) {}
};

}  // namespace headroom::agent
