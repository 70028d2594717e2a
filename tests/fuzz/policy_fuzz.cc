// Fuzzes policy files and, for those that load, decisions on varied inputs: whatever loads must
// decide without crashing, and every command must stay inside the actuator ranges.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "control/actuators.h"
#include "control/policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto policy = headroom::control::PolicyFromJson(text, "fuzz.json");
  if (!policy.ok()) return 0;
  headroom::control::ActuatorLimits limits;
  limits.concurrency = {1, 64};
  limits.group_size = {4, 16};
  limits.nameplate_w = 400.0;
  headroom::control::PolicyController controller(*policy, limits);
  std::vector<double> power{0.0, 0.0};
  headroom::control::Applied applied{8, 8, 0.0, false, false};
  for (int i = 0; i < 64; ++i) {
    power[0] = 50.0 + 7.0 * i;
    power[1] = 400.0 - 5.0 * i;
    headroom::control::Inputs in;
    in.t_s = 0.5 * i;
    in.budget_w = 300.0;
    in.smoothed_power_w = power;
    in.phase = static_cast<headroom::control::Phase>(i % headroom::control::kPhaseCount);
    in.rollout_progress = (i % 10) / 10.0;
    in.concurrency = applied.concurrency;
    in.group_size = applied.group_size;
    in.next_group_size = applied.group_size;
    applied = headroom::control::ApplyLimits(limits, applied, controller.Decide(in));
    if (applied.concurrency < 1 || applied.concurrency > 64) std::abort();
    if (applied.group_size < 4 || applied.group_size > 16) std::abort();
  }
  return 0;
}
