#include "control/over_budget.h"

namespace headroom::control {

std::optional<double> JobPowerPerGpuW(std::span<const std::optional<double>> readings_w) {
  double sum = 0.0;
  int n = 0;
  for (const auto& r : readings_w) {
    if (!r) continue;
    sum += *r;
    ++n;
  }
  if (n == 0) return std::nullopt;
  return sum / n;
}

bool SustainedExcess::Observe(std::optional<double> job_power_w, double budget_w,
                              const ExcessRule& rule) {
  if (!job_power_w) return false;  // unknown: the run stands as it is
  run_ = *job_power_w > budget_w * (1.0 + rule.margin) ? run_ + 1 : 0;
  if (run_ < rule.sustain) return false;
  run_ = 0;
  return true;
}

}  // namespace headroom::control
