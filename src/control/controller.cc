#include "control/controller.h"

#include <algorithm>

namespace headroom::control {

std::string_view PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kIdle:
      return "idle";
    case Phase::kRollout:
      return "rollout";
    case Phase::kLogprob:
      return "logprob";
    case Phase::kTrain:
      return "train";
    case Phase::kSync:
      return "sync";
    case Phase::kCheckpoint:
      return "checkpoint";
  }
  return "?";
}

double Inputs::JobPowerW() const {
  if (smoothed_power_w.empty()) return 0.0;
  double sum = 0.0;
  for (double p : smoothed_power_w) sum += p;
  return sum / static_cast<double>(smoothed_power_w.size());
}

}  // namespace headroom::control
