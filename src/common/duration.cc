#include "common/duration.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

namespace headroom {
namespace {

constexpr double kSecondsPerMinute = 60.0;
constexpr double kSecondsPerHour = 3600.0;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

Result<double> ParseDurationS(std::string_view text, BareNumber bare) {
  const std::string_view s = Trim(text);
  double value = 0.0;
  // A plain decimal: a digit first (after a sign), so from_chars reads no "inf" or "nan".
  const size_t first = !s.empty() && s.front() == '-' ? 1 : 0;
  const bool digit_first = first < s.size() && s[first] >= '0' && s[first] <= '9';
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (!digit_first || ec != std::errc() || ptr == s.data()) {
    return Error::Usage(
        fmt::format("bad duration '{}': expected a number with a unit "
                    "(ms, s, min, h), e.g. 30s",
                    text));
  }
  const std::string_view unit = Trim(std::string_view(ptr, s.data() + s.size() - ptr));
  double scale = 0.0;
  if (unit.empty() && bare == BareNumber::kRefused) {
    return Error::Usage(fmt::format("bad duration '{}': give a unit (ms, s, min or h), e.g. {}s",
                                    text, Trim(text)));
  }
  if (unit.empty() || unit == "s") {
    scale = 1.0;
  } else if (unit == "ms") {
    scale = 1e-3;
  } else if (unit == "min") {
    scale = kSecondsPerMinute;
  } else if (unit == "h") {
    scale = kSecondsPerHour;
  } else {
    return Error::Usage(
        fmt::format("bad duration '{}': unknown unit '{}' (use ms, s, min or h)", text, unit));
  }
  const double seconds = value * scale;
  if (!std::isfinite(seconds) || seconds <= 0.0) {
    return Error::Usage(fmt::format("bad duration '{}': must be > 0", text));
  }
  return seconds;
}

Result<std::vector<double>> ParseDurationListS(std::string_view text, BareNumber bare) {
  std::vector<double> out;
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    auto parsed = ParseDurationS(item, bare);
    if (!parsed) return std::move(parsed).error();
    out.push_back(*parsed);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

std::string FormatDurationS(double seconds) {
  const auto is_multiple = [seconds](double unit) {
    const double n = seconds / unit;
    return n >= 1.0 && n == std::floor(n);
  };
  if (is_multiple(kSecondsPerHour)) return fmt::format("{}h", seconds / kSecondsPerHour);
  if (is_multiple(kSecondsPerMinute)) return fmt::format("{}min", seconds / kSecondsPerMinute);
  return fmt::format("{}s", seconds);
}

}  // namespace headroom
