// A site budget that changes on a schedule, with notice (docs/SITE.md, "Demand response"): a
// utility's demand-response event, a planned maintenance window. When to ask the coordinator
// for each change. Pure.
#pragma once

#include <cstddef>
#include <vector>

namespace headroom::coord {

struct BudgetEvent {
  double t_s = 0.0;  // from when the budget applies
  double site_budget_w = 0.0;
  double notice_s = 0.0;  // known this long before t_s
};

// A decrease is asked `lead_s` before it starts (at most its notice earlier), so that the grants
// are down and acknowledged when it does; an increase when it starts (earlier would overrun the
// budget still in force). By time.
struct BudgetRequest {
  double at_s = 0.0;
  double site_budget_w = 0.0;
  size_t event = 0;  // index into the schedule
};
std::vector<BudgetRequest> PlanBudgetRequests(const std::vector<BudgetEvent>& events, double base_w,
                                              double lead_s);

}  // namespace headroom::coord
