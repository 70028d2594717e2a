// Budgets that move, from the command line: `--budget-schedule FILE` (CSV t_s,budget_w, a step
// function; docs/METRICS.md, "A moving budget").
#pragma once

#include <string>

#include "analysis/budget_schedule.h"
#include "common/error.h"

namespace headroom::cli {

// A schedule file is at most this large (a change point a second for a month fits).
inline constexpr uint64_t kMaxScheduleBytes = 64ull << 20;

// Reads and checks a schedule file; the error names the file, the line and the field.
Result<analysis::BudgetSchedule> LoadBudgetSchedule(const std::string& path, double max_budget_w);

}  // namespace headroom::cli
