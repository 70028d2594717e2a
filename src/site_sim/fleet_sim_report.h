// `headroom fleet-sim`'s outputs: the terminal table, the JSON object (keys in docs/SITE.md),
// and the HTML report (the site's power against its budget, the grants per job).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "site_sim/fleet_sim_result.h"

namespace headroom::site_sim {

nlohmann::json FleetSimToJson(const FleetSimResult& r, uint64_t seed);
std::string FleetSimToText(const FleetSimResult& r);
std::string FleetSimReportHtml(const FleetSimResult& r, uint64_t seed);

}  // namespace headroom::site_sim
