// What `headroom eval` and `headroom train` share: a budget checked against a scenario's range,
// and comma-separated lists.
#pragma once

#include <string>
#include <vector>

#include "common/error.h"
#include "twin/scenario.h"

namespace headroom::cli {

// A Usage error when budget_w is outside the scenario's budget.range_w.
Status CheckBudget(const twin::Scenario& s, double budget_w);
// "a, b,,c" -> {"a", "b", "c"}: spaces dropped, empty items skipped.
std::vector<std::string> SplitComma(const std::string& text);

}  // namespace headroom::cli
