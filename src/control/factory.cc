#include "control/factory.h"

#include <fmt/format.h>

namespace headroom::control {

std::unique_ptr<Shield> ShieldForPolicy(Controller& inner, const ShieldRule& rule,
                                        double cost_window_s, bool group_size_only,
                                        double interval_s, Range concurrency) {
  if (group_size_only) return nullptr;
  return std::make_unique<Shield>(inner, ShieldFor(cost_window_s, interval_s, rule), concurrency);
}

Result<BuiltController> MakeController(const ControllerSpec& spec) {
  BuiltController b;
  const std::string label = spec.label.empty() ? spec.kind : spec.label;
  if (spec.kind == "uncontrolled") {
    b.inner_ = std::make_unique<Uncontrolled>(spec.concurrency, spec.group_size);
  } else if (spec.kind == "static") {
    b.inner_ = std::make_unique<Static>(label, spec.concurrency, spec.group_size);
  } else if (spec.kind == "power-cap") {
    b.inner_ = std::make_unique<PowerCap>(spec.concurrency, spec.group_size);
  } else if (spec.kind == "pid") {
    b.inner_ =
        std::make_unique<Pid>(spec.pid, spec.limits.concurrency, spec.concurrency, spec.group_size,
                              spec.limits.nameplate_w, spec.limits.power_limit_min_w);
  } else if (spec.kind == "ppo") {
    if (spec.policy == nullptr) return Error::Usage("controller 'ppo' needs a policy");
    b.inner_ = std::make_unique<PolicyController>(*spec.policy, spec.limits);
    auto shield =
        ShieldForPolicy(*b.inner_, spec.policy->shield, spec.policy->cost_window_s,
                        spec.policy->group_size_only, spec.interval_s, spec.limits.concurrency);
    b.shield_ = shield.get();
    b.outer_ = std::move(shield);
  } else {
    return Error::Usage(fmt::format(
        "unknown controller '{}' (uncontrolled, static, power-cap, pid, ppo)", spec.kind));
  }
  return b;
}

}  // namespace headroom::control
