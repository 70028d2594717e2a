#include "coord/site_schedule.h"

#include <algorithm>

namespace headroom::coord {

std::vector<BudgetRequest> PlanBudgetRequests(const std::vector<BudgetEvent>& events, double base_w,
                                              double lead_s) {
  std::vector<BudgetRequest> out;
  double before_w = base_w;
  for (size_t i = 0; i < events.size(); ++i) {
    const BudgetEvent& e = events[i];
    const bool decrease = e.site_budget_w < before_w;
    const double at_s = decrease ? std::max(0.0, e.t_s - std::min(lead_s, e.notice_s)) : e.t_s;
    out.push_back({at_s, e.site_budget_w, i});
    before_w = e.site_budget_w;
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const BudgetRequest& a, const BudgetRequest& b) { return a.at_s < b.at_s; });
  return out;
}

}  // namespace headroom::coord
