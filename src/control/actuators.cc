#include "control/actuators.h"

#include <algorithm>
#include <cmath>

namespace headroom::control {

Applied ApplyLimits(const ActuatorLimits& limits, const Applied& current, const Command& command) {
  Applied a = current;
  a.concurrency_clamped = false;
  a.group_size_clamped = false;
  if (command.concurrency) {
    int want = limits.concurrency.Clamp(*command.concurrency);
    a.concurrency_clamped = want != *command.concurrency;
    if (want > current.concurrency) {
      const int ceiling = std::max(
          current.concurrency + 1,
          static_cast<int>(std::ceil(current.concurrency * limits.max_rise_factor - 1e-9)));
      if (want > ceiling) {
        want = ceiling;
        a.concurrency_clamped = true;
      }
    }
    a.concurrency = want;
  }
  if (command.group_size) {
    a.group_size = limits.group_size.Clamp(*command.group_size);
    a.group_size_clamped = a.group_size != *command.group_size;
  }
  if (command.power_limit_w) {
    const double w = *command.power_limit_w;
    if (w <= 0.0 || (limits.nameplate_w > 0.0 && w >= limits.nameplate_w)) {
      a.power_limit_w = 0.0;
    } else {
      a.power_limit_w = std::max(w, limits.power_limit_min_w);
    }
  }
  return a;
}

}  // namespace headroom::control
