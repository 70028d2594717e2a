#include "analysis/budget_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>

#include "common/stats.h"
#include "common/text_lines.h"
#include "trace/number_parse.h"
#include "trace/schema.h"

namespace headroom::analysis {

BudgetSchedule::BudgetSchedule(std::vector<Point> points) {
  for (const Point& p : points) Append(p.t_s, p.budget_w);
}

void BudgetSchedule::Append(double t_s, double budget_w) {
  assert(budget_w > 0.0 && std::isfinite(budget_w));
  if (points_.empty()) {
    points_.push_back({t_s, budget_w});
    integral_.push_back(0.0);
    return;
  }
  assert(t_s >= points_.back().t_s);
  if (budget_w == points_.back().budget_w) return;
  if (t_s == points_.back().t_s) {  // two values at one time: the later stands
    points_.back().budget_w = budget_w;
    if (points_.size() > 1 && points_[points_.size() - 2].budget_w == budget_w) {
      points_.pop_back();
      integral_.pop_back();
    }
    return;
  }
  integral_.push_back(integral_.back() + points_.back().budget_w * (t_s - points_.back().t_s));
  points_.push_back({t_s, budget_w});
}

void BudgetSchedule::DropBefore(double t_s) {
  // Keep the last point at or before t_s and everything after.
  size_t keep = 0;
  while (keep + 1 < points_.size() && points_[keep + 1].t_s <= t_s) ++keep;
  if (keep == 0) return;
  std::vector<Point> rest(points_.begin() + static_cast<std::ptrdiff_t>(keep), points_.end());
  points_.clear();
  integral_.clear();
  for (const Point& p : rest) Append(p.t_s, p.budget_w);
}

double BudgetSchedule::At(double t_s) const {
  assert(!points_.empty());
  const auto it = std::upper_bound(points_.begin(), points_.end(), t_s,
                                   [](double t, const Point& p) { return t < p.t_s; });
  return it == points_.begin() ? points_.front().budget_w : std::prev(it)->budget_w;
}

double BudgetSchedule::IntegralTo(double t_s) const {
  const auto it = std::upper_bound(points_.begin(), points_.end(), t_s,
                                   [](double t, const Point& p) { return t < p.t_s; });
  const size_t i = static_cast<size_t>(std::prev(it) - points_.begin());
  return integral_[i] + points_[i].budget_w * (t_s - points_[i].t_s);
}

double BudgetSchedule::MeanW(double a_s, double b_s) const {
  assert(!points_.empty());
  if (!(b_s > a_s)) return At(a_s);
  const double t0 = points_.front().t_s;
  const double first_w = points_.front().budget_w;
  // Before the first point the budget is the first value.
  const auto integral = [&](double t) { return t <= t0 ? first_w * (t - t0) : IntegralTo(t); };
  return (integral(b_s) - integral(a_s)) / (b_s - a_s);
}

double BudgetSchedule::MinW() const {
  double m = points_.front().budget_w;
  for (const Point& p : points_) m = std::min(m, p.budget_w);
  return m;
}

double BudgetSchedule::MaxW() const {
  double m = points_.front().budget_w;
  for (const Point& p : points_) m = std::max(m, p.budget_w);
  return m;
}

BudgetSchedule BudgetSchedule::Scaled(double k) const {
  BudgetSchedule s;
  for (const Point& p : points_) s.Append(p.t_s, p.budget_w * k);
  return s;
}

std::vector<double> BudgetSchedule::DecreasesAt() const {
  std::vector<double> out;
  for (size_t i = 1; i < points_.size(); ++i) {
    if (points_[i].budget_w < points_[i - 1].budget_w) out.push_back(points_[i].t_s);
  }
  return out;
}

Result<BudgetSchedule> ParseBudgetSchedule(std::string_view text, std::string_view name,
                                           double max_budget_w) {
  BudgetSchedule schedule;
  bool header = false;
  double last_t_s = 0.0;
  Status bad = OkStatus();
  ForEachDataLine(text, [&](size_t line_no, std::string_view line) {
    if (!header) {
      if (line != "t_s,budget_w") {
        bad = Error::Input(fmt::format("{}:{}: expected the header 't_s,budget_w'", name, line_no));
        return false;
      }
      header = true;
      return true;
    }
    const size_t comma = line.find(',');
    if (comma == std::string_view::npos || line.find(',', comma + 1) != std::string_view::npos) {
      bad = Error::Input(fmt::format("{}:{}: expected two fields, t_s,budget_w", name, line_no));
      return false;
    }
    const auto t_s = trace::ParseFieldNumber(line.substr(0, comma));
    if (!t_s || *t_s < 0.0 || *t_s > trace::kMaxTimeS) {
      bad = Error::Input(fmt::format("{}:{}: field 't_s': expected seconds in [0, {}]", name,
                                     line_no, trace::kMaxTimeS));
      return false;
    }
    if (!schedule.empty() && !(*t_s > last_t_s)) {
      bad = Error::Input(fmt::format("{}:{}: field 't_s': {} is not after the previous row's {}",
                                     name, line_no, *t_s, last_t_s));
      return false;
    }
    const auto w = trace::ParseFieldNumber(line.substr(comma + 1));
    if (!w || !(*w > 0.0 && *w <= max_budget_w)) {
      bad = Error::Input(fmt::format("{}:{}: field 'budget_w': expected watts in (0, {}]", name,
                                     line_no, max_budget_w));
      return false;
    }
    last_t_s = *t_s;
    schedule.Append(*t_s, *w);
    return true;
  });
  if (!bad) return bad.error();
  if (!header)
    return Error::Input(fmt::format("{}: empty; expected the header 't_s,budget_w'", name));
  if (schedule.empty())
    return Error::Input(fmt::format("{}: no change point after the header", name));
  return schedule;
}

void SettleTracker::Add(double t_s, double power_w) {
  const std::vector<BudgetSchedule::Point>& points = schedule_->points();
  // The changes this sample has passed: each ends the open event (unsettled if it is), and a
  // decrease opens one against its new budget.
  while (next_change_ < points.size() && points[next_change_].t_s <= t_s) {
    EndEvent();
    if (points[next_change_].budget_w < points[next_change_ - 1].budget_w) {
      event_s_ = points[next_change_].t_s;
      event_budget_w_ = points[next_change_].budget_w;
    }
    ++next_change_;
  }
  recent_.emplace_back(t_s, power_w);
  recent_sum_w_ += power_w;
  while (recent_.front().first <= t_s - kSettleMeanS) {
    recent_sum_w_ -= recent_.front().second;
    recent_.pop_front();
  }
  if (!event_s_) return;
  // Summed afresh while short (the usual case), so that the running sum cannot drift.
  if (recent_.size() <= 64) {
    recent_sum_w_ = 0.0;
    for (const auto& r : recent_) recent_sum_w_ += r.second;
  }
  const double mean_w = recent_sum_w_ / static_cast<double>(recent_.size());
  if (mean_w <= event_budget_w_) {
    if (!hold_from_s_) hold_from_s_ = t_s;
    if (t_s - *hold_from_s_ >= kSettleHoldS - 1e-9) {
      settled_s_.push_back(*hold_from_s_ - *event_s_);
      event_s_.reset();
      hold_from_s_.reset();
    }
  } else {
    hold_from_s_.reset();
  }
}

void SettleTracker::AddRun(const double* t_s, const double* power_w, size_t n, size_t stride) {
  for (size_t i = 0; i < n; ++i) Add(t_s[i], power_w[i * stride]);
}

void SettleTracker::EndEvent() {
  if (event_s_) ++unsettled_;
  event_s_.reset();
  hold_from_s_.reset();
}

void SettleTracker::Finish() {
  // Decreases after the last sample were never seen settling either.
  const std::vector<BudgetSchedule::Point>& points = schedule_->points();
  EndEvent();
  for (; next_change_ < points.size(); ++next_change_) {
    if (points[next_change_].budget_w < points[next_change_ - 1].budget_w) ++unsettled_;
  }
}

SettleSummary SummarizeSettle(std::vector<double> settled_s, size_t unsettled) {
  SettleSummary s;
  s.events = settled_s.size() + unsettled;
  s.unsettled = unsettled;
  if (settled_s.empty()) return s;
  s.p50_s = QuantileNearestRank(settled_s, 0.50);
  s.p99_s = QuantileNearestRank(settled_s, 0.99);
  s.max_s = *std::max_element(settled_s.begin(), settled_s.end());
  return s;
}

}  // namespace headroom::analysis
