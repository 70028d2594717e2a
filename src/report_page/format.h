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

// A number as people read it: thousands separated by commas, never in scientific notation —
// `decimals` after the point (trailing zeros kept), e.g. Number(1276000) "1,276,000",
// Number(1234.5, 1) "1,234.5". Non-finite: "-".
std::string Number(double v, int decimals = 0);

// A number with `significant` digits (at least; whole digits are never rounded away), grouped
// as Number: Significant(1.2765e6) "1,276,500", Significant(0.012345) "0.01235".
std::string Significant(double v, int significant = 4);

}  // namespace headroom::report
