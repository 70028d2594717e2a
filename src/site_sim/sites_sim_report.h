// `headroom sites-sim`'s outputs: the terminal table, the JSON object (keys in docs/FLEET.md,
// "Several sites"), and the HTML report (each site's power stacked against its budget, where
// the workers were, its grid's carbon intensity).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "site_sim/sites_sim.h"

namespace headroom::report {

nlohmann::json SitesSimToJson(const sim::SitesSimResult& r);
std::string SitesSimToText(const sim::SitesSimResult& r);
std::string SitesSimReportHtml(const sim::SitesSimResult& r, const sim::SitesSimConfig& config);

}  // namespace headroom::report
