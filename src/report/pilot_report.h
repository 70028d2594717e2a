// `headroom pilot`'s outputs (docs/PILOT.md): the plan, the judged pilot and the validation,
// each as a terminal table, a JSON object and (plan, report) a self-contained HTML page.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pilot/design.h"
#include "pilot/judge.h"
#include "pilot/simulate.h"

namespace headroom::report {

// The baseline behind a plan: each trace's name and its block values in time order.
struct PilotBaseline {
  std::vector<std::string> traces;
  std::vector<std::vector<double>> blocks;
};

// Keys: metric, effect_pct, alpha, power, block_s, blocks, days, autocorrelation_lag1,
// gpu_hours_at_risk, cost_usd, and more (docs/PILOT.md).
nlohmann::ordered_json PilotPlanToJson(const pilot::PilotPlan& plan, const PilotBaseline& baseline);
std::string PilotPlanToText(const pilot::PilotPlan& plan, const PilotBaseline& baseline);
std::string PilotPlanReportHtml(const pilot::PilotPlan& plan, const PilotBaseline& baseline);

nlohmann::ordered_json PilotReportToJson(const pilot::PilotReport& report);
std::string PilotReportToText(const pilot::PilotReport& report);
std::string PilotReportHtml(const pilot::PilotReport& report);

struct PilotValidationInfo {
  std::string metric;
  double block_s = 0.0;
  size_t baseline_blocks = 0;
  double effect_frac = 0.0;
  double alpha = 0.05;
};
nlohmann::ordered_json PilotValidationToJson(const pilot::SimulationResult& r,
                                             const PilotValidationInfo& info);
std::string PilotValidationToText(const pilot::SimulationResult& r,
                                  const PilotValidationInfo& info);

}  // namespace headroom::report
