// `headroom sites-sim`'s outputs: the terminal table, the JSON object (keys in docs/SITE.md,
// "Several sites"), and the HTML report (each site's power stacked against its budget, where
// the workers were, its grid's carbon intensity).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "site_sim/sites_sim.h"

namespace headroom::site_sim {

nlohmann::json SitesSimToJson(const SitesSimResult& r);
std::string SitesSimToText(const SitesSimResult& r);
std::string SitesSimReportHtml(const SitesSimResult& r, const SitesSimConfig& config);

}  // namespace headroom::site_sim
