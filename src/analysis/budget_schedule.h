// A budget that moves: a step function of time, and what is scored against it
// (docs/METRICS.md, "A moving budget" — the one definition of both).
//
// The budget is b(t) = the value of the last change point at or before t (the first value
// before the first point). A window [a, b) violates when its mean power is above the
// time-weighted mean of b over [a, b) (MeanW). settle_s of a decrease at time c to budget B:
// the time from c until the trailing 1 s mean power first stays at or below B for 5 s, before
// the schedule changes again (SettleTracker).
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace headroom::analysis {

class BudgetSchedule {
 public:
  struct Point {
    double t_s;
    double budget_w;
  };

  BudgetSchedule() = default;
  explicit BudgetSchedule(std::vector<Point> points);  // REQUIRES: as Append, in order

  // Adds a change point; a value equal to the last one adds nothing.
  // REQUIRES: t_s >= the last point's time; budget_w > 0 and finite.
  void Append(double t_s, double budget_w);
  // Forgets the points no time at or after t_s needs (the one in force at t_s stays).
  void DropBefore(double t_s);

  bool empty() const { return points_.empty(); }
  const std::vector<Point>& points() const { return points_; }
  // Whether it changes at all.
  bool moves() const { return points_.size() > 1; }
  // REQUIRES: !empty().
  double At(double t_s) const;
  // Time-weighted mean over [a_s, b_s); At(a_s) when b_s <= a_s. REQUIRES: !empty().
  double MeanW(double a_s, double b_s) const;
  double MinW() const;
  double MaxW() const;
  // The schedule times k (a job's budget from a per-GPU one).
  BudgetSchedule Scaled(double k) const;
  // The times of the decreases, in order.
  std::vector<double> DecreasesAt() const;

 private:
  // Integral of b from points_[0].t_s to t_s, for t_s >= points_[0].t_s.
  double IntegralTo(double t_s) const;
  std::vector<Point> points_;
  std::vector<double> integral_;  // integral_[i]: of b from points_[0].t_s to points_[i].t_s
};

// A schedule file: CSV `t_s,budget_w` with that header, one change point per row, times
// strictly increasing, budgets in (0, max_budget_w]. `name` is the file's name for errors
// ("FILE:LINE: field 'budget_w': ...").
Result<BudgetSchedule> ParseBudgetSchedule(std::string_view text, std::string_view name,
                                           double max_budget_w);

inline constexpr double kSettleMeanS = 1.0;  // the trailing mean power of settle_s
inline constexpr double kSettleHoldS = 5.0;  // how long it must stay at or below the budget

// settle_s of every decrease of one series against its schedule: the time from the decrease
// until the trailing 1 s mean power first stays at or below the new budget for 5 s. An event
// ends at the schedule's next change (up or down) or at the series' end; one not settled by then
// counts as unsettled.
class SettleTracker {
 public:
  // `schedule` outlives the tracker; it may grow while samples are added, as long as it holds
  // every change point up to the time added.
  explicit SettleTracker(const BudgetSchedule* schedule) : schedule_(schedule) {}

  // REQUIRES: t_s non-decreasing.
  void Add(double t_s, double power_w);
  // Strided: power_w[i * stride] at t_s[i].
  void AddRun(const double* t_s, const double* power_w, size_t n, size_t stride = 1);
  // Ends the open event. REQUIRES: once, after the last Add.
  void Finish();

  // Settled events' settle_s, in order of the decreases.
  const std::vector<double>& settled_s() const { return settled_s_; }
  size_t unsettled() const { return unsettled_; }

 private:
  void EndEvent();
  const BudgetSchedule* schedule_;
  std::deque<std::pair<double, double>> recent_;  // (t, power) within the trailing mean
  double recent_sum_w_ = 0.0;
  size_t next_change_ = 1;         // index into the schedule's points: the next change to pass
  std::optional<double> event_s_;  // the open event's decrease time, while unsettled
  double event_budget_w_ = 0.0;    // its new budget
  std::optional<double> hold_from_s_;
  std::vector<double> settled_s_;
  size_t unsettled_ = 0;
};

// settle_s over events, as reported: p50, p99 (nearest rank), max, events, unsettled.
struct SettleSummary {
  size_t events = 0;
  size_t unsettled = 0;
  std::optional<double> p50_s;  // none when no event settled
  std::optional<double> p99_s;
  std::optional<double> max_s;
};
SettleSummary SummarizeSettle(std::vector<double> settled_s, size_t unsettled);

}  // namespace headroom::analysis
