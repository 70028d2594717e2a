// What was built: the project's version and the git commit of the source tree ("-dirty" when it
// had uncommitted changes; "unknown" outside a git checkout). Generated at every build by
// cmake/BuildInfo.cmake into the library headroom_build_info; `--version`, both daemons'
// /v1/status and /metrics (`headroom_build_info`) and their first log line say them.
#pragma once

#include <string>
#include <string_view>

namespace headroom {

std::string_view Version();
std::string_view Commit();

// `headroom_build_info{version="...",commit="..."} 1`, with its HELP and TYPE lines: the first
// metric of both daemons' /metrics.
std::string BuildInfoMetric();

}  // namespace headroom
