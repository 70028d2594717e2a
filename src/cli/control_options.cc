#include "cli/control_options.h"

#include <fmt/format.h>

namespace headroom::cli {

Status CheckBudget(const twin::Scenario& s, double budget_w) {
  if (!(budget_w >= s.budget_range_w.first && budget_w <= s.budget_range_w.second)) {
    return Error::Usage(
        fmt::format("--budget-w: {} W is outside scenario '{}''s budget range [{}, {}] W per GPU",
                    budget_w, s.name, s.budget_range_w.first, s.budget_range_w.second));
  }
  return OkStatus();
}

std::vector<std::string> SplitComma(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : text) {
    if (c == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// ---- eval ----------------------------------------------------------------------------------

}  // namespace headroom::cli
