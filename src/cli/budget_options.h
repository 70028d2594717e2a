// Budgets that move, from the command line: `--budget-schedule FILE` (CSV t_s,budget_w, a step
// function; docs/METRICS.md, "A moving budget"), and for the twin also a generator
// (sim/budget_plan.h: steps:LOW_W:HIGH_W:PERIOD_S, demand-response, walk).
#pragma once

#include <string>

#include "analysis/budget_schedule.h"
#include "cli/numbers.h"
#include "common/error.h"
#include "sim/budget_plan.h"

namespace headroom::cli {

// A schedule file is at most this large (a change point a second for a month fits).
inline constexpr uint64_t kMaxScheduleBytes = 64ull << 20;

// Reads and checks a schedule file; the error names the file, the line and the field.
Result<analysis::BudgetSchedule> LoadBudgetSchedule(const std::string& path, double max_budget_w);

// A generator's name or a schedule file (budgets per GPU, or up to max_budget_w for a site's).
Result<sim::BudgetPlanSpec> ParseBudgetPlan(const std::string& text,
                                            double max_budget_w = kMaxGpuPowerW);

// The help text of --budget-schedule where generators are taken.
inline constexpr const char* kBudgetPlanHelp =
    "A budget that moves: a CSV file t_s,budget_w (per GPU), or steps:LOW_W:HIGH_W:PERIOD_S, "
    "demand-response or walk (around --budget-w, default the top of the scenario's range)";

}  // namespace headroom::cli
