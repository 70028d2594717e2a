#include "site_sim/site_signals.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>

#include "common/read_file.h"
#include "common/text_lines.h"
#include "trace/number_parse.h"

namespace headroom::site_sim {
namespace {

constexpr std::string_view kHeader = "t_s,spare_w,price_eur_per_mwh,carbon_g_per_kwh";
constexpr std::array<const char*, 4> kFields = {"t_s", "spare_w", "price_eur_per_mwh",
                                                "carbon_g_per_kwh"};

}  // namespace

const SiteSignal& SiteSignals::At(double t_s) const {
  const auto it = std::upper_bound(points_.begin(), points_.end(), t_s,
                                   [](double t, const SiteSignal& p) { return t < p.t_s; });
  return it == points_.begin() ? points_.front() : *(it - 1);
}

Result<SiteSignals> ParseSiteSignals(std::string_view text, std::string_view name) {
  SiteSignals s;
  bool header = false;
  Status bad = OkStatus();
  ForEachDataLine(text, [&](size_t line_no, std::string_view line) {
    const auto fail = [&](std::string message) {
      bad = Error::Input(fmt::format("{}:{}: {}", name, line_no, message));
      return false;
    };
    if (!header) {
      if (line != kHeader) return fail(fmt::format("expected the header '{}'", kHeader));
      header = true;
      return true;
    }
    std::array<double, 4> v{};
    size_t from = 0;
    for (size_t f = 0; f < 4; ++f) {
      const size_t comma = line.find(',', from);
      if ((f < 3) != (comma != std::string_view::npos)) {
        return fail(fmt::format("expected four fields, {}", kHeader));
      }
      const auto n =
          trace::ParseFieldNumber(line.substr(from, f < 3 ? comma - from : std::string_view::npos));
      if (!n) return fail(fmt::format("field '{}': expected a number", kFields[f]));
      v[f] = *n;
      from = comma + 1;
    }
    const SiteSignal p{v[0], v[1], v[2], v[3]};
    if (s.points_.empty() ? p.t_s != 0.0 : !(p.t_s > s.points_.back().t_s) || p.t_s > 1e9) {
      return fail(fmt::format("field 't_s': expected {}",
                              s.points_.empty() ? std::string("0 on the first row")
                                                : fmt::format("a time after the previous row's {}",
                                                              s.points_.back().t_s)));
    }
    if (!(p.spare_w >= 0.0 && p.spare_w <= 1e9)) {
      return fail("field 'spare_w': expected watts in [0, 1e9]");
    }
    if (!(p.price_eur_per_mwh >= -1e4 && p.price_eur_per_mwh <= 1e5)) {
      return fail("field 'price_eur_per_mwh': expected -10000 to 100000");
    }
    if (!(p.carbon_g_per_kwh >= 0.0 && p.carbon_g_per_kwh <= 5000.0)) {
      return fail("field 'carbon_g_per_kwh': expected 0 to 5000");
    }
    s.points_.push_back(p);
    return true;
  });
  if (!bad) return bad.error();
  if (s.points_.empty()) {
    return Error::Input(
        fmt::format("{}: no rows (expected the header '{}' and rows)", name, kHeader));
  }
  return s;
}

Result<SiteSignals> ReadSiteSignals(const std::string& path) {
  auto text = ReadFileCapped(path, kMaxDataFileBytes);
  if (!text) return std::move(text).error();
  return ParseSiteSignals(*text, path);
}

}  // namespace headroom::site_sim
