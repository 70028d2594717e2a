// Durations written the way people write them: "500ms", "0.5s", "30s", "5min", "1h".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace headroom {

// Whether a number without a unit is a duration: seconds (kSeconds), or an error (kRefused,
// for options documented as "with a unit", such as --windows).
enum class BareNumber { kSeconds, kRefused };

// Parses one duration: a plain decimal number ([-]digits[.digits][e[+-]digits], no NaN, inf or
// hex) and a unit: ms, s, min, h; with kSeconds a bare number is seconds. Blanks around number
// and unit are allowed. Fails on an unknown or missing unit, a non-number, or a value that is
// not finite and > 0.
Result<double> ParseDurationS(std::string_view text, BareNumber bare = BareNumber::kSeconds);

// Parses a comma-separated list of durations, e.g. "0.5s,30s,5min". Fails on an empty list.
Result<std::vector<double>> ParseDurationListS(std::string_view text,
                                               BareNumber bare = BareNumber::kSeconds);

// The shortest natural label of a duration: 0.5 -> "0.5s", 30 -> "30s", 300 -> "5min",
// 3600 -> "1h", 90 -> "90s", 0.25 -> "0.25s". Used as the key of a window in JSON output.
std::string FormatDurationS(double seconds);

}  // namespace headroom
