// Where the shipped data sets are: policies/ (and, for tools, the rest of share/headroom/).
//
// An installed binary is PREFIX/bin/headroom and its data PREFIX/share/headroom/<what>
// (`cmake --install`, the .deb: /usr). A binary run from its build finds the source tree's
// <what> instead. Never the current directory: `fleet-sim` run from elsewhere must not quietly
// fall back to PID for want of ./policies.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace headroom {

// The rule, pure: the first of EXE_DIR/../share/headroom/<what> and SOURCE_DIR/<what> that
// `is_dir` accepts; "" when neither (SOURCE_DIR empty: none). `exe` is the binary's own path.
std::string ResolveDataDir(std::string_view exe, std::string_view source_dir, std::string_view what,
                           const std::function<bool(const std::string&)>& is_dir);

// The rule on this process: its binary from /proc/self/exe and the source tree the build was
// configured from (HEADROOM_SOURCE_DIR). "" when neither has <what>.
std::string SharedDataDir(std::string_view what);

}  // namespace headroom
