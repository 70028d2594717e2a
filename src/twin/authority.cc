#include "twin/authority.h"

#include <fmt/format.h>

#include "twin/twin.h"

namespace headroom::twin {
namespace {

double ChangePct(double low, double high) { return low != 0.0 ? (high - low) / low * 100.0 : 0.0; }

}  // namespace

SettingMeasurement MeasureSetting(const Scenario& scenario, int concurrency, int group_size,
                                  double power_limit_w, const AuthorityOptions& options) {
  double rollout_sum = 0.0;
  double rollout_count = 0.0;
  double time_s = 0.0;
  double tokens = 0.0;
  double steps = 0.0;
  for (uint64_t seed : options.seeds) {
    Twin twin(scenario, seed);
    twin.SetConcurrency(concurrency);
    twin.SetGroupSize(group_size);
    twin.SetPowerLimit(power_limit_w);
    // The default group size was drawn for step 0 at construction; restart the count so every
    // measured step uses the requested one.
    while (twin.steps_done() < 1) twin.Tick();
    const double t0 = twin.t_s();
    const double tokens0 = twin.tokens_total();
    while (twin.steps_done() < 1 + options.steps) {
      twin.Tick();
      if (twin.phase() == Phase::kRollout) {
        for (double p : twin.power_w()) rollout_sum += p;
        rollout_count += static_cast<double>(twin.power_w().size());
      }
    }
    time_s += twin.t_s() - t0;
    tokens += twin.tokens_total() - tokens0;
    steps += options.steps;
  }
  SettingMeasurement m;
  m.rollout_power_w = rollout_count > 0.0 ? rollout_sum / rollout_count : 0.0;
  m.step_time_s = steps > 0.0 ? time_s / steps : 0.0;
  m.tokens_per_s = time_s > 0.0 ? tokens / time_s : 0.0;
  return m;
}

Result<AuthorityResult> MeasureAuthority(const Scenario& scenario,
                                         const AuthorityOptions& options) {
  if (!scenario.has_rollout) {
    return Error::Usage(
        fmt::format("scenario {} has no rollout: nothing for the rollout "
                    "actuators to act on",
                    scenario.name));
  }
  AuthorityResult result;
  result.scenario = scenario.name;
  const auto add = [&](std::string name, double low_value, double high_value,
                       const SettingMeasurement& low, const SettingMeasurement& high) {
    ActuatorAuthority a;
    a.name = std::move(name);
    a.low = low;
    a.high = high;
    a.low.value = low_value;
    a.high.value = high_value;
    a.rollout_power_change_pct = ChangePct(low.rollout_power_w, high.rollout_power_w);
    a.step_time_change_pct = ChangePct(low.step_time_s, high.step_time_s);
    a.tokens_per_s_change_pct = ChangePct(low.tokens_per_s, high.tokens_per_s);
    result.actuators.push_back(a);
  };
  const int c = scenario.concurrency, g = scenario.group_size;
  const auto& cr = scenario.concurrency_range;
  const auto& gr = scenario.group_size_range;
  add("concurrency", cr.lo, cr.hi, MeasureSetting(scenario, cr.lo, g, 0.0, options),
      MeasureSetting(scenario, cr.hi, g, 0.0, options));
  add("group_size", gr.lo, gr.hi, MeasureSetting(scenario, c, gr.lo, 0.0, options),
      MeasureSetting(scenario, c, gr.hi, 0.0, options));
  add("power_limit_w", scenario.power_limit_min_w, scenario.nameplate_w,
      MeasureSetting(scenario, c, g, scenario.power_limit_min_w, options),
      MeasureSetting(scenario, c, g, 0.0, options));
  return result;
}

}  // namespace headroom::twin
