#pragma once
// A site's signals over time (docs/SITE.md, "Several sites"): the watts its guaranteed jobs
// leave (spare), the electricity price and the grid's carbon intensity. A CSV file:
//
//   # comments
//   t_s,spare_w,price_eur_per_mwh,carbon_g_per_kwh
//   0,812.5,97.0,56
//   60,640.0,97.0,56
//
// t_s from 0, increasing; each row holds until the next (the last until the end). Pure parsing
// (ParseSiteSignals) apart from the one read (ReadSiteSignals).
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace headroom::site_sim {

struct SiteSignal {
  double t_s = 0.0;
  double spare_w = 0.0;
  double price_eur_per_mwh = 0.0;
  double carbon_g_per_kwh = 0.0;
};

class SiteSignals {
 public:
  const std::vector<SiteSignal>& points() const { return points_; }
  // The row in force at t_s (the first row before it).
  const SiteSignal& At(double t_s) const;
  double end_s() const { return points_.empty() ? 0.0 : points_.back().t_s; }

 private:
  friend Result<SiteSignals> ParseSiteSignals(std::string_view text, std::string_view name);
  std::vector<SiteSignal> points_;
};

// Errors name the file, the line and the field; nothing is returned in part.
Result<SiteSignals> ParseSiteSignals(std::string_view text, std::string_view name);
Result<SiteSignals> ReadSiteSignals(const std::string& path);

}  // namespace headroom::site_sim
