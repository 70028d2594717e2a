#include "pilot/design.h"

#include <fmt/format.h>

#include <cmath>

#include "common/duration.h"

namespace headroom::pilot {

namespace {
constexpr double kSecondsPerDay = 86400.0;
constexpr double kSecondsPerHour = 3600.0;
}  // namespace

std::string_view ArmName(Arm arm) {
  return arm == Arm::kControlled ? "controlled" : "uncontrolled";
}

std::vector<ScheduledBlock> AlternatingSchedule(int64_t pairs, double block_s, uint64_t seed,
                                                int64_t max_blocks) {
  Rng rng(seed);
  std::vector<ScheduledBlock> out;
  for (int64_t p = 0; p < pairs && 2 * p < max_blocks; ++p) {
    const bool controlled_first = rng.Index(2) == 0;
    for (int64_t j = 0; j < 2 && 2 * p + j < max_blocks; ++j) {
      const bool controlled = (j == 0) == controlled_first;
      const int64_t index = 2 * p + j;
      out.push_back({index, static_cast<double>(index) * block_s,
                     controlled ? Arm::kControlled : Arm::kUncontrolled});
    }
  }
  return out;
}

Result<PilotPlan> PlanPilot(const std::vector<std::vector<double>>& baseline,
                            const PlanOptions& options) {
  PilotPlan plan;
  plan.options = options;
  std::vector<double> all;
  for (const auto& s : baseline) all.insert(all.end(), s.begin(), s.end());
  plan.baseline_blocks = all.size();
  const std::string block = FormatDurationS(options.block_s);
  if (all.size() < kMinBaselineBlocks) {
    return Error::Usage(
        fmt::format("baseline holds {} block{} of {}; at least {} are needed to estimate the block "
                    "variance: give more baseline or a shorter --block",
                    all.size(), all.size() == 1 ? "" : "s", block, kMinBaselineBlocks));
  }
  plan.baseline_mean = Mean(all);
  plan.baseline_sd = std::sqrt(SampleVariance(all));
  if (plan.baseline_mean == 0.0) {
    return Error::Usage(fmt::format(
        "{}: the baseline's block mean is 0, and a relative --effect of 0 is 0: choose another "
        "--metric{}",
        MetricName(options.metric),
        options.metric == Metric::kViolations ? ", a lower --budget-w or a shorter --window" : ""));
  }
  plan.autocorrelation_lag1 = Lag1Autocorrelation(baseline).value_or(0.0);
  plan.size = BlocksPerArm({plan.baseline_mean, plan.baseline_sd, plan.autocorrelation_lag1,
                            options.effect_frac, options.alpha, options.power});
  const int64_t per_arm = plan.size.blocks_per_arm;
  plan.blocks = per_arm > INT64_MAX / 2 ? INT64_MAX : 2 * per_arm;
  plan.days = static_cast<double>(plan.blocks) * options.block_s / kSecondsPerDay;
  plan.gpu_hours_at_risk = static_cast<double>(per_arm) * options.block_s / kSecondsPerHour *
                           static_cast<double>(options.gpus);
  plan.cost_usd = plan.gpu_hours_at_risk * options.usd_per_gpu_hour;
  plan.schedule = AlternatingSchedule(per_arm, options.block_s, options.seed);
  plan.schedule_truncated = plan.blocks > static_cast<int64_t>(plan.schedule.size());

  const double rho = plan.autocorrelation_lag1;
  if (rho > kLargeAutocorrelation) {
    plan.advice.push_back(fmt::format(
        "lag-1 autocorrelation {:.2f} of {} blocks is large: adjacent blocks are not "
        "independent, and the variance is inflated {:.2f}x for it; longer blocks (--block) "
        "would be closer to independent",
        rho, block, plan.size.variance_inflation));
  }
  if (rho >= kMaxRho) {
    plan.advice.push_back(fmt::format(
        "the autocorrelation is capped at {} in the inflation: the figure above is a lower bound",
        kMaxRho));
  }
  if (all.size() < 20) {
    plan.advice.push_back(fmt::format(
        "the block variance rests on {} baseline blocks only: its estimate is rough (a longer "
        "baseline makes the plan firmer)",
        all.size()));
  }
  if (plan.size.blocks_per_arm == plan.size.permutation_floor &&
      plan.size.formula_blocks_per_arm < static_cast<double>(plan.size.permutation_floor)) {
    plan.advice.push_back(fmt::format(
        "{} blocks per arm is the fewest at which the permutation test can reach p <= {} at all",
        plan.size.permutation_floor, options.alpha));
  }
  return plan;
}

}  // namespace headroom::pilot
