// Self-contained HTML reports (inline CSS and SVG; nothing fetched).
#pragma once

#include <string>
#include <vector>

#include "analysis/analyzer.h"
#include "fleet/fleet.h"
#include "report/json.h"

namespace headroom::report {

// REQUIRES: the result was computed with AnalyzeOptions::plot_data.
std::string AnalyzeReportHtml(const analysis::AnalyzeResult& result, const TraceInfo& info);

std::string FleetReportHtml(const fleet::FleetResult& result, const std::vector<fleet::Job>& jobs);

}  // namespace headroom::report
