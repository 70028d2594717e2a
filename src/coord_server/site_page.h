// The coordinator's site page (GET /): one self-contained HTML page, inline CSS and JS, that
// polls this replica's /v1/status every second and draws with <canvas>: the grants per job
// stacked against the site budget and the reserve, each job's power, and a table of the jobs.
// Nothing is fetched from anywhere else. The POST form takes a token from the page's #token=T
// (the fragment never leaves the browser). Colours and layout follow web/dashboard/.
// Built from web/site/ (index.html, site.css, site.js) by cmake/EmbedPage.cmake, as the
// agent's dashboard is from web/dashboard/.
#pragma once

#include <string_view>

namespace headroom::coord_server {

extern const std::string_view kSitePage;

}  // namespace headroom::coord_server
