// Actuators: clamp a command to the ranges, rate-limit it, report what was applied.
//
// Concurrency may fall at once (safety first) but rise by at most a factor `max_rise_factor`
// (rounded up, at least +1) per interval, so that a learned or tuned controller cannot jump from
// the floor to the ceiling in one step. Group size is clamped to its range; it takes effect at the
// next step boundary, so no rate limit is needed. A power limit of 0 (or >= nameplate) is none;
// it is clamped to [power_limit_min_w, nameplate] and, like concurrency, may fall at once but
// rise by at most `power_limit_rise_w` per interval (lifting it is a rise to nameplate), so
// that a controller cannot swing the clocks from the floor to full in one interval.
#pragma once

#include "control/controller.h"

namespace headroom::control {

// The fastest a power limit rises, as a fraction of nameplate per second (40 W/s at 400 W).
inline constexpr double kPowerLimitRisePerS = 0.1;

struct ActuatorLimits {
  Range concurrency;
  Range group_size;
  double max_rise_factor = 2.0;
  double nameplate_w = 0.0;
  double power_limit_min_w = 0.0;
  double power_limit_rise_w = 0.0;  // per interval, per GPU; 0: no rate limit
};

struct Applied {
  int concurrency = 0;
  int group_size = 0;
  double power_limit_w = 0.0;  // 0: none
  bool concurrency_clamped = false;
  bool group_size_clamped = false;
  bool power_limit_clamped = false;
};

// `current` is the actuation in force; fields the command leaves unset keep their current value.
Applied ApplyLimits(const ActuatorLimits& limits, const Applied& current, const Command& command);

}  // namespace headroom::control
