#include "control/controller.h"

#include <algorithm>

namespace headroom::control {

double Inputs::JobPowerW() const {
  if (smoothed_power_w.empty()) return 0.0;
  double sum = 0.0;
  for (double p : smoothed_power_w) sum += p;
  return sum / static_cast<double>(smoothed_power_w.size());
}

}  // namespace headroom::control
