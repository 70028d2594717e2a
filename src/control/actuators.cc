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
  a.power_limit_clamped = false;
  if (command.power_limit_w) {
    const double w = *command.power_limit_w;
    double want = w;
    if (w <= 0.0 || (limits.nameplate_w > 0.0 && w >= limits.nameplate_w)) {
      want = 0.0;
    } else {
      want = std::max(w, limits.power_limit_min_w);
    }
    // A rise from a limit in force: at most power_limit_rise_w (none = nameplate).
    if (limits.power_limit_rise_w > 0.0 && limits.nameplate_w > 0.0 &&
        current.power_limit_w > 0.0) {
      const double ceiling_w = current.power_limit_w + limits.power_limit_rise_w;
      const double want_w = want > 0.0 ? want : limits.nameplate_w;
      if (want_w > ceiling_w) {
        want = ceiling_w >= limits.nameplate_w ? 0.0 : ceiling_w;
        a.power_limit_clamped = want != 0.0;
      }
    }
    a.power_limit_w = want;
  }
  return a;
}

}  // namespace headroom::control
