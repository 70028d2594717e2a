// Budgets that move during a run of the twin (`twin run`, `eval`, `train`): a schedule file, or a
// generator seeded per run so that every controller on a seed meets the same budgets.
//
//   steps:LOW_W:HIGH_W:PERIOD_S  HIGH from t = 0, LOW from PERIOD, HIGH from 2 PERIOD, ...
//   demand-response              events at random times: the budget drops 10-30 % below the base
//                                for 5-30 min, announced 10 s ahead; the first starts within
//                                the first 15 min (or third of the run), the next 5-30 min after
//                                the previous one ends
//   walk                         a bounded random walk, as a coordinator's grants move: every
//                                60 s a step of N(0, 5 % of the base), reflected into
//                                [70 % of the base, the base]
//
// The base is the run's budget; every level is kept within `range_w` (a budget the scenario's
// job cannot meet by steering generation is no test of a controller: a drop below the range is
// cut at its low end, and the schedule says how many were). Change points fall on control
// intervals. All budgets per GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "analysis/budget_schedule.h"
#include "common/error.h"

namespace headroom::sim {

enum class BudgetPlanKind { kFile, kSteps, kDemandResponse, kWalk };

struct BudgetPlanSpec {
  BudgetPlanKind kind = BudgetPlanKind::kFile;
  std::string text;                                  // as given: the file's name or the generator
  analysis::BudgetSchedule file;                     // kFile
  double low_w = 0.0, high_w = 0.0, period_s = 0.0;  // kSteps
};

inline constexpr double kDemandResponseNoticeS = 10.0;

// "steps:...", "demand-response" or "walk"; nullopt when `text` names none of them (a file).
// A malformed steps spec is a usage error naming its part.
Result<std::optional<BudgetPlanSpec>> ParseBudgetGenerator(std::string_view text);

struct BudgetPlan {
  analysis::BudgetSchedule per_gpu_w;
  double notice_s = 0.0;  // how far ahead each change is announced
  int clipped = 0;        // levels cut at the range's low end
};

// The plan of one run. REQUIRES: base_w > 0, range_w.first <= range_w.second, horizon_s > 0,
// interval_s > 0.
BudgetPlan MakeBudgetPlan(const BudgetPlanSpec& spec, double base_w,
                          std::pair<double, double> range_w, double horizon_s, uint64_t seed,
                          double interval_s);

}  // namespace headroom::sim
