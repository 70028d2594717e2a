// The outputs of `headroom eval`: JSON (the keys of docs/CONTROL.md), text tables, HTML report.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "sim/evaluate.h"

namespace headroom::report {

nlohmann::ordered_json EvalToJson(const sim::EvalResult& result);
std::string EvalToText(const sim::EvalResult& result);
// REQUIRES: the first seed's runs recorded their power (EvalConfig::record_power).
std::string EvalReportHtml(const sim::EvalResult& result, double interval_s);

}  // namespace headroom::report
