// The agent's live dashboard (GET /): one self-contained HTML page — uPlot and the dashboard's own
// script inlined at build time by cmake/EmbedPage.cmake from web/ — that polls /v1/status.
#pragma once

#include <string_view>

namespace headroom::agent {

extern const std::string_view kDashboardHtml;

}  // namespace headroom::agent
