#include "twin/authority.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <future>
#include <vector>

#include "twin/twin.h"

namespace headroom::twin {
namespace {

double ChangePct(double low, double high) { return low != 0.0 ? (high - low) / low * 100.0 : 0.0; }

}  // namespace

SettingMeasurement MeasureSetting(const Scenario& scenario, int concurrency, int group_size,
                                  double power_limit_w, const AuthorityOptions& options) {
  // One twin per seed, each in its own thread; sums are combined in seed order, so the result
  // does not depend on scheduling.
  struct Run {
    double rollout_sum = 0.0, rollout_count = 0.0, time_s = 0.0, tokens = 0.0;
    double rollout_s = 0.0, rollout_tokens = 0.0;
  };
  const auto run_seed = [&](uint64_t seed) {
    Run r;
    Twin twin(scenario, seed);
    twin.SetConcurrency(concurrency);
    twin.SetGroupSize(group_size);
    twin.SetPowerLimit(power_limit_w);
    // Step 0 was drawn with the default group size at construction and starts from idle: it is
    // the warm-up; the measured steps use the requested settings.
    while (twin.steps_done() < 1) twin.Tick();
    const double t0 = twin.t_s();
    const double tokens0 = twin.tokens_total();
    while (twin.steps_done() < 1 + options.steps) {
      const double tokens_before = twin.tokens_total();
      const double t_before = twin.t_s();
      twin.Tick();
      if (twin.phase() == Phase::kRollout) {
        for (double p : twin.power_w()) r.rollout_sum += p;
        r.rollout_count += static_cast<double>(twin.power_w().size());
        r.rollout_s += twin.t_s() - t_before;
        r.rollout_tokens += twin.tokens_total() - tokens_before;
      }
    }
    r.time_s = twin.t_s() - t0;
    r.tokens = twin.tokens_total() - tokens0;
    return r;
  };
  std::vector<std::future<Run>> runs;
  for (uint64_t seed : options.seeds)
    runs.push_back(std::async(std::launch::async, run_seed, seed));
  Run total;
  for (auto& f : runs) {
    const Run r = f.get();
    total.rollout_sum += r.rollout_sum;
    total.rollout_count += r.rollout_count;
    total.time_s += r.time_s;
    total.tokens += r.tokens;
    total.rollout_s += r.rollout_s;
    total.rollout_tokens += r.rollout_tokens;
  }
  const double steps = static_cast<double>(options.steps * options.seeds.size());
  SettingMeasurement m;
  m.rollout_power_w = total.rollout_count > 0.0 ? total.rollout_sum / total.rollout_count : 0.0;
  m.step_time_s = steps > 0.0 ? total.time_s / steps : 0.0;
  m.tokens_per_s = total.time_s > 0.0 ? total.tokens / total.time_s : 0.0;
  m.rollout_tokens_per_s = total.rollout_s > 0.0 ? total.rollout_tokens / total.rollout_s : 0.0;
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

namespace headroom::twin {

Result<std::vector<RolloutPoint>> RolloutValueCurve(const Scenario& scenario,
                                                    const AuthorityOptions& options, int points) {
  if (!scenario.has_rollout) {
    return Error::Usage(fmt::format("scenario {} has no rollout: no value curve", scenario.name));
  }
  const int lo = std::max(1, scenario.concurrency_range.lo);
  const int hi = std::max(lo, scenario.concurrency_range.hi);
  std::vector<int> settings;
  for (int i = 0; i < std::max(2, points); ++i) {
    const double f = static_cast<double>(i) / static_cast<double>(std::max(2, points) - 1);
    const int c = static_cast<int>(std::lround(lo * std::pow(static_cast<double>(hi) / lo, f)));
    if (settings.empty() || c > settings.back()) settings.push_back(c);
  }
  std::vector<RolloutPoint> out;
  for (int c : settings) {
    const SettingMeasurement m = MeasureSetting(scenario, c, scenario.group_size, 0.0, options);
    out.push_back({c, m.rollout_power_w, m.rollout_tokens_per_s});
  }
  return out;
}

}  // namespace headroom::twin
