// Durations written the way people write them: "500ms", "0.5s", "30s", "5min", "1h".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace headroom {

// Parses one duration; a bare number is seconds. Units: ms, s, min, h.
// Fails on an unknown unit, a non-number, or a value that is not finite and > 0.
Result<double> ParseDurationS(std::string_view text);

// Parses a comma-separated list of durations, e.g. "0.5s,30s,5min". Fails on an empty list.
Result<std::vector<double>> ParseDurationListS(std::string_view text);

// The shortest natural label of a duration: 0.5 -> "0.5s", 30 -> "30s", 300 -> "5min",
// 3600 -> "1h", 90 -> "90s", 0.25 -> "0.25s". Used as the key of a window in JSON output.
std::string FormatDurationS(double seconds);

}  // namespace headroom
