#include "report_page/format.h"

#include <algorithm>
#include <cmath>

namespace headroom::report {

std::string Number(double v, int decimals) {
  if (!std::isfinite(v)) return "-";
  std::string text = fmt::format("{:.{}f}", std::abs(v), decimals);
  const size_t point = text.find('.');
  std::string whole = text.substr(0, point);
  const std::string fraction = point == std::string::npos ? "" : text.substr(point);
  std::string grouped;
  for (size_t i = 0; i < whole.size(); ++i) {
    if (i > 0 && (whole.size() - i) % 3 == 0) grouped += ',';
    grouped += whole[i];
  }
  const bool negative = v < 0.0 && text.find_first_not_of("0.,") != std::string::npos;
  return (negative ? "-" : "") + grouped + fraction;
}

std::string Significant(double v, int significant) {
  if (!std::isfinite(v)) return "-";
  if (v == 0.0) return "0";
  const int magnitude = static_cast<int>(std::floor(std::log10(std::abs(v))));
  const int decimals = std::clamp(significant - 1 - magnitude, 0, 12);
  return Number(v, decimals);
}

}  // namespace headroom::report
