#include "cli/budget_options.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/numbers.h"

namespace headroom::cli {

Result<analysis::BudgetSchedule> LoadBudgetSchedule(const std::string& path, double max_budget_w) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec)
    return Error::Io(fmt::format("{}: cannot read the budget schedule: {}", path, ec.message()));
  if (size > kMaxScheduleBytes) {
    return Error::Input(fmt::format("{}: {} bytes; a budget schedule is at most {} bytes", path,
                                    size, kMaxScheduleBytes));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error::Io(fmt::format("{}: cannot open the budget schedule", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return analysis::ParseBudgetSchedule(ss.str(), path, max_budget_w);
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
