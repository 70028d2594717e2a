#include "coord/value_allocation.h"

#include <algorithm>
#include <cmath>
#include <tuple>

namespace headroom::coord {
namespace {

constexpr double kCurveEpsW = 1e-9;

// The budget at which a concave, non-decreasing curve first reaches `tokens_per_s` (its floor
// when already there; its last point's budget when never).
double BudgetFor(const std::vector<ValuePoint>& c, double tokens_per_s) {
  if (tokens_per_s <= c.front().tokens_per_s) return c.front().budget_w;
  for (size_t i = 1; i < c.size(); ++i) {
    if (tokens_per_s <= c[i].tokens_per_s) {
      const double dt = c[i].tokens_per_s - c[i - 1].tokens_per_s;
      const double f = dt > 0.0 ? (tokens_per_s - c[i - 1].tokens_per_s) / dt : 0.0;
      return c[i - 1].budget_w + f * (c[i].budget_w - c[i - 1].budget_w);
    }
  }
  return c.back().budget_w;
}

}  // namespace

std::vector<ValuePoint> ConcaveCurve(const ValueJob& job) {
  const double lo = job.floor_w;
  const double hi = std::max(job.floor_w, job.demand_w);
  std::vector<ValuePoint> pts;
  for (const ValuePoint& p : job.curve) {
    if (std::isfinite(p.budget_w) && std::isfinite(p.tokens_per_s) && p.tokens_per_s >= 0.0) {
      pts.push_back(p);
    }
  }
  std::sort(pts.begin(), pts.end(), [](const ValuePoint& a, const ValuePoint& b) {
    return std::tie(a.budget_w, a.tokens_per_s) < std::tie(b.budget_w, b.tokens_per_s);
  });
  // Tokens/s at the floor: interpolated between the points around it, else the nearest point's.
  double at_floor = 0.0;
  if (!pts.empty()) {
    at_floor = pts.front().budget_w >= lo ? pts.front().tokens_per_s : pts.back().tokens_per_s;
    for (size_t i = 1; i < pts.size(); ++i) {
      if (pts[i - 1].budget_w <= lo && lo <= pts[i].budget_w) {
        const double span = pts[i].budget_w - pts[i - 1].budget_w;
        const double f = span > 0.0 ? (lo - pts[i - 1].budget_w) / span : 1.0;
        at_floor = pts[i - 1].tokens_per_s + f * (pts[i].tokens_per_s - pts[i - 1].tokens_per_s);
        break;
      }
    }
  }
  std::vector<ValuePoint> in{{lo, at_floor}};
  for (const ValuePoint& p : pts) {
    if (p.budget_w > lo + kCurveEpsW && p.budget_w <= hi + kCurveEpsW) {
      in.push_back({std::min(p.budget_w, hi), p.tokens_per_s});
    }
  }
  // Non-decreasing: more watts never make fewer tokens (a dip is noise).
  for (size_t i = 1; i < in.size(); ++i) {
    in[i].tokens_per_s = std::max(in[i].tokens_per_s, in[i - 1].tokens_per_s);
  }
  // Upper concave hull (Andrew's monotone chain, the upper half).
  std::vector<ValuePoint> hull;
  for (const ValuePoint& p : in) {
    if (!hull.empty() && p.budget_w <= hull.back().budget_w + kCurveEpsW) {
      hull.back().tokens_per_s = std::max(hull.back().tokens_per_s, p.tokens_per_s);
      continue;
    }
    while (hull.size() >= 2) {
      const ValuePoint& a = hull[hull.size() - 2];
      const ValuePoint& b = hull.back();
      // Drop b when it lies on or below the chord from a to p.
      const double cross = (b.budget_w - a.budget_w) * (p.tokens_per_s - a.tokens_per_s) -
                           (b.tokens_per_s - a.tokens_per_s) * (p.budget_w - a.budget_w);
      if (cross >= 0.0) {
        hull.pop_back();
      } else {
        break;
      }
    }
    hull.push_back(p);
  }
  if (hull.back().budget_w < hi - kCurveEpsW) hull.push_back({hi, hull.back().tokens_per_s});
  return hull;
}

double CurveTokensPerS(const std::vector<ValuePoint>& c, double budget_w) {
  if (c.empty()) return 0.0;
  if (budget_w <= c.front().budget_w) return c.front().tokens_per_s;
  for (size_t i = 1; i < c.size(); ++i) {
    if (budget_w <= c[i].budget_w) {
      const double span = c[i].budget_w - c[i - 1].budget_w;
      const double f = span > 0.0 ? (budget_w - c[i - 1].budget_w) / span : 1.0;
      return c[i - 1].tokens_per_s + f * (c[i].tokens_per_s - c[i - 1].tokens_per_s);
    }
  }
  return c.back().tokens_per_s;
}

std::map<std::string, double> AllocateByValue(double available_w,
                                              const std::map<std::string, ValueJob>& jobs,
                                              Fairness fairness) {
  struct Work {
    const std::string* name;
    std::vector<ValuePoint> curve;
    double floor_w, demand_w, at_w;
  };
  std::vector<Work> work;
  work.reserve(jobs.size());
  double used_w = 0.0;
  for (const auto& [name, j] : jobs) {
    Work w{&name, ConcaveCurve(j), j.floor_w, std::max(j.floor_w, j.demand_w), j.floor_w};
    used_w += j.floor_w;
    work.push_back(std::move(w));
  }
  double rest_w = std::max(0.0, available_w - used_w);

  // 1. Max-min: the largest common fraction of each job's attainable gain that fits.
  if (fairness == Fairness::kMaxMin && rest_w > 0.0) {
    const auto need = [&](double level) {
      double sum_w = 0.0;
      for (const Work& w : work) {
        const double t0 = w.curve.front().tokens_per_s;
        const double t1 = w.curve.back().tokens_per_s;
        sum_w += BudgetFor(w.curve, t0 + level * (t1 - t0)) - w.floor_w;
      }
      return sum_w;
    };
    double level = 1.0;
    if (need(1.0) > rest_w) {
      double lo = 0.0, hi = 1.0;
      for (int i = 0; i < 60; ++i) {
        const double mid = 0.5 * (lo + hi);
        (need(mid) <= rest_w ? lo : hi) = mid;
      }
      level = lo;
    }
    for (Work& w : work) {
      const double t0 = w.curve.front().tokens_per_s;
      const double t1 = w.curve.back().tokens_per_s;
      const double b = BudgetFor(w.curve, t0 + level * (t1 - t0));
      rest_w -= b - w.at_w;
      w.at_w = b;
    }
    rest_w = std::max(0.0, rest_w);
  }

  // 2. Water-filling: the curves' segments above where each job is, steepest first.
  struct Segment {
    double slope;
    size_t job;
    double watts;
  };
  std::vector<Segment> segments;
  for (size_t k = 0; k < work.size(); ++k) {
    const Work& w = work[k];
    for (size_t i = 1; i < w.curve.size(); ++i) {
      const double from_w = std::max(w.curve[i - 1].budget_w, w.at_w);
      const double to_w = w.curve[i].budget_w;
      if (to_w <= from_w + kCurveEpsW) continue;
      const double slope = (w.curve[i].tokens_per_s - w.curve[i - 1].tokens_per_s) /
                           (w.curve[i].budget_w - w.curve[i - 1].budget_w);
      if (slope > 0.0) segments.push_back({slope, k, to_w - from_w});
    }
  }
  std::stable_sort(segments.begin(), segments.end(),
                   [](const Segment& a, const Segment& b) { return a.slope > b.slope; });
  for (size_t s = 0; s < segments.size() && rest_w > kCurveEpsW;) {
    // A group of equal slopes (relative 1e-9) shares what is left in proportion to its watts.
    size_t e = s;
    double group_w = 0.0;
    while (e < segments.size() &&
           std::abs(segments[e].slope - segments[s].slope) <= 1e-9 * segments[s].slope) {
      group_w += segments[e].watts;
      ++e;
    }
    const double f = std::min(1.0, rest_w / group_w);
    for (size_t g = s; g < e; ++g) work[segments[g].job].at_w += f * segments[g].watts;
    rest_w -= f * group_w;
    s = e;
  }

  // 3. What no slope takes: in proportion to the demand left.
  if (rest_w > kCurveEpsW) {
    double left_w = 0.0;
    for (const Work& w : work) left_w += std::max(0.0, w.demand_w - w.at_w);
    if (left_w > 0.0) {
      const double f = std::min(1.0, rest_w / left_w);
      for (Work& w : work) w.at_w += f * std::max(0.0, w.demand_w - w.at_w);
    }
  }
  std::map<std::string, double> out;
  for (const Work& w : work) out[*w.name] = std::min(w.at_w, w.demand_w);
  return out;
}

}  // namespace headroom::coord
