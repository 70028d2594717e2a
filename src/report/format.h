#pragma once
// The cells the terminal tables and the HTML report share: one definition of each.
#include <fmt/format.h>

#include <optional>
#include <string>

namespace headroom::report {

// A fraction as a percentage with two decimals ("12.34%"); "-" when absent.
inline std::string Pct(std::optional<double> fraction) {
  return fraction ? fmt::format("{:.2f}%", *fraction * 100.0) : "-";
}
// Watts with one decimal; "-" when absent.
inline std::string Watts(std::optional<double> w) { return w ? fmt::format("{:.1f}", *w) : "-"; }

}  // namespace headroom::report
