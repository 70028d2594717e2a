// Self-contained HTML reports (inline CSS and SVG; nothing fetched).
#pragma once

#include <string>
#include <vector>

#include "analysis/analyzer.h"
#include "planning/fleet.h"
#include "report/json.h"

namespace headroom::report {

// REQUIRES: the result was computed with AnalyzeOptions::plot_data.
std::string AnalyzeReportHtml(const analysis::AnalyzeResult& result, const TraceInfo& info);

std::string FleetReportHtml(const planning::FleetResult& result,
                            const std::vector<planning::Job>& jobs);

}  // namespace headroom::report
