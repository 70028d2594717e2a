// Every controller built in one place, for `headroom agent`, `eval` and `train`
// (docs/CONTROL.md): the same kinds, the same defaults, and a policy always in the shield it was
// trained in (stretched to its scoring window), or alone when it may only move group size.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/error.h"
#include "control/baselines.h"
#include "control/controller.h"
#include "control/policy.h"

namespace headroom::control {

struct ControllerSpec {
  std::string kind;   // uncontrolled | static | power-cap | pid | ppo
  std::string label;  // the name it reports (e.g. "static-safe"); empty: the kind
  ActuatorLimits limits;
  double interval_s = 0.5;
  int concurrency = 1;  // uncontrolled, static, power-cap: the setting; pid: where it starts
  int group_size = 1;   // uncontrolled, static, power-cap, pid
  PidGains pid;
  const Policy* policy = nullptr;  // ppo; outlives the controller
};

// A controller and what it wraps (a policy inside its shield).
class BuiltController {
 public:
  Controller& get() const { return outer_ ? *outer_ : *inner_; }
  const Shield* shield() const { return shield_; }

 private:
  friend Result<BuiltController> MakeController(const ControllerSpec& spec);
  std::unique_ptr<Controller> inner_;
  std::unique_ptr<Controller> outer_;
  const Shield* shield_ = nullptr;
};

// The usage error names the kind.
Result<BuiltController> MakeController(const ControllerSpec& spec);

// What a policy's commands go through, in training as in use: its shield (`rule` stretched to
// the policy's scoring window, ShieldFor), or nothing (null) for a policy that may only move
// group size: there is no concurrency to cut.
std::unique_ptr<Shield> ShieldForPolicy(Controller& inner, const ShieldRule& rule,
                                        double cost_window_s, bool group_size_only,
                                        double interval_s, Range concurrency);

}  // namespace headroom::control
