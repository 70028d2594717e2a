#include "cli/budget_options.h"
#include "common/read_file.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/numbers.h"

namespace headroom::cli {

Result<analysis::BudgetSchedule> LoadBudgetSchedule(const std::string& path, double max_budget_w) {
  auto text = ReadFileCapped(path, kMaxScheduleBytes, "the budget schedule");
  if (!text) return std::move(text).error();
  return analysis::ParseBudgetSchedule(*text, path, max_budget_w);
}

Result<sim::BudgetPlanSpec> ParseBudgetPlan(const std::string& text, double max_budget_w) {
  auto generator = sim::ParseBudgetGenerator(text);
  if (!generator) return std::move(generator).error();
  if (*generator) return std::move(**generator);
  auto file = LoadBudgetSchedule(text, max_budget_w);
  if (!file) return std::move(file).error();
  sim::BudgetPlanSpec spec;
  spec.kind = sim::BudgetPlanKind::kFile;
  spec.text = text;
  spec.file = std::move(*file);
  return spec;
}

}  // namespace headroom::cli
