// Machine-readable output: the `--json` objects of `analyze` and `fleet`. Unknown values are
// null, never invented.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "analysis/analyzer.h"
#include "planning/fleet.h"

namespace headroom::report {

struct TraceInfo {
  std::string path;
  std::string format;
  // What the numbers are when they are not the recorded samples (a Prometheus range: its step);
  // empty for a trace file.
  std::string resolution;
};

// settle_s as every report writes it: p50, p99, max (null when no event settled), events,
// unsettled.
nlohmann::ordered_json SettleToJson(const analysis::SettleSummary& s);
nlohmann::ordered_json AnalyzeToJson(const analysis::AnalyzeResult& result, const TraceInfo& info);
nlohmann::ordered_json FleetToJson(const planning::FleetResult& result,
                                   const std::vector<planning::Job>& jobs);

}  // namespace headroom::report
