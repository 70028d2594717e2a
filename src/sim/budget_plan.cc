#include "sim/budget_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <random>
#include <vector>

namespace headroom::sim {
namespace {

std::optional<double> PlainNumber(std::string_view s) {
  double v = 0.0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// On a control interval.
double OnInterval(double t_s, double interval_s) {
  return std::round(t_s / interval_s) * interval_s;
}

}  // namespace

Result<std::optional<BudgetPlanSpec>> ParseBudgetGenerator(std::string_view text) {
  BudgetPlanSpec spec;
  spec.text = std::string(text);
  if (text == "demand-response") {
    spec.kind = BudgetPlanKind::kDemandResponse;
    return std::optional<BudgetPlanSpec>(spec);
  }
  if (text == "walk") {
    spec.kind = BudgetPlanKind::kWalk;
    return std::optional<BudgetPlanSpec>(spec);
  }
  if (text.substr(0, 6) != "steps:") return std::optional<BudgetPlanSpec>();
  std::vector<std::string_view> parts;
  std::string_view rest = text.substr(6);
  while (true) {
    const size_t colon = rest.find(':');
    parts.push_back(rest.substr(0, colon));
    if (colon == std::string_view::npos) break;
    rest = rest.substr(colon + 1);
  }
  const auto usage = [&](std::string_view what) {
    return Error::Usage(fmt::format("--budget-schedule '{}': {} (steps:LOW_W:HIGH_W:PERIOD_S)",
                                    text.substr(0, 64), what));
  };
  if (parts.size() != 3) return usage("expected three numbers");
  const auto low = PlainNumber(parts[0]);
  const auto high = PlainNumber(parts[1]);
  const auto period = PlainNumber(parts[2]);
  if (!low || !(*low > 0.0 && *low <= 10000.0)) return usage("LOW_W: watts in (0, 10000]");
  if (!high || !(*high >= *low && *high <= 10000.0))
    return usage("HIGH_W: watts in [LOW_W, 10000]");
  if (!period || !(*period >= 1.0 && *period <= 1e7)) return usage("PERIOD_S: seconds in [1, 1e7]");
  spec.kind = BudgetPlanKind::kSteps;
  spec.low_w = *low;
  spec.high_w = *high;
  spec.period_s = *period;
  return std::optional<BudgetPlanSpec>(spec);
}

BudgetPlan MakeBudgetPlan(const BudgetPlanSpec& spec, double base_w,
                          std::pair<double, double> range_w, double horizon_s, uint64_t seed,
                          double interval_s) {
  BudgetPlan plan;
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 0x5DEECE66Dull);
  const auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  const auto level = [&](double w) {
    if (w < range_w.first) {
      ++plan.clipped;
      w = range_w.first;
    }
    return std::round(std::min(w, std::max(range_w.second, base_w)) * 10.0) / 10.0;
  };
  analysis::BudgetSchedule& s = plan.per_gpu_w;
  // No change in the run's last minute: a decrease needs time to be seen settling (5 s held),
  // and one at the very end would count against every controller alike.
  const double last_change_s = std::max(0.0, horizon_s - std::min(60.0, horizon_s / 4.0));
  switch (spec.kind) {
    case BudgetPlanKind::kFile:
      s = spec.file;
      break;
    case BudgetPlanKind::kSteps: {
      for (int k = 0; k == 0 || static_cast<double>(k) * spec.period_s < last_change_s; ++k) {
        s.Append(OnInterval(k * spec.period_s, interval_s), k % 2 == 0 ? spec.high_w : spec.low_w);
      }
      break;
    }
    case BudgetPlanKind::kDemandResponse: {
      plan.notice_s = kDemandResponseNoticeS;
      s.Append(0.0, base_w);
      double t = uniform(60.0, std::max(60.0, std::min(900.0, horizon_s / 3.0)));
      while (t < last_change_s) {
        const double drop = uniform(0.10, 0.30);
        const double lasts_s = uniform(300.0, 1800.0);
        const double start = OnInterval(t, interval_s);
        const double end = OnInterval(t + lasts_s, interval_s);
        s.Append(start, level(base_w * (1.0 - drop)));
        if (end < last_change_s) s.Append(end, base_w);
        t = end + uniform(300.0, 1800.0);
      }
      break;
    }
    case BudgetPlanKind::kWalk: {
      const double lo = std::max(range_w.first, 0.7 * base_w);
      const double hi = std::max(lo, base_w);
      double w = base_w;
      std::normal_distribution<double> step(0.0, 0.05 * base_w);
      s.Append(0.0, level(w));
      for (double t = 60.0; t < last_change_s; t += 60.0) {
        w += step(rng);
        // Reflected into [lo, hi] (twice covers any step under the width).
        for (int k = 0; k < 2; ++k) {
          if (w < lo) w = 2.0 * lo - w;
          if (w > hi) w = 2.0 * hi - w;
        }
        w = std::clamp(w, lo, hi);
        s.Append(OnInterval(t, interval_s), level(w));
      }
      break;
    }
  }
  return plan;
}

}  // namespace headroom::sim
