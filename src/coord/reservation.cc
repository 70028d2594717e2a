#include "coord/reservation.h"

#include <algorithm>
#include <cmath>
#include <tuple>

namespace headroom::coord {
namespace {

constexpr double kFitTolW = 1e-6;

// When the step in progress's update starts and ends, from now, and when the next step starts;
// false when the timeline has no step length yet.
bool CurrentUpdate(const StepTimeline& t, double* start_s, double* end_s, double* next_step_s) {
  const double rollout_s = std::max(0.0, t.rollout_s);
  const double rest_s = std::max(0.0, t.rest_s);
  if (!(rollout_s + rest_s > 0.0) || !(rest_s > 0.0)) return false;
  if (t.held_left_s > 0.0) {  // held before the next step: its update is decided
    *start_s = t.held_left_s + rollout_s;
  } else if (t.in_rollout) {
    *start_s = std::max(0.0, rollout_s - t.phase_elapsed_s);
  } else {
    *start_s = 0.0;
    *end_s = std::max(0.0, rest_s - t.phase_elapsed_s);
    *next_step_s = *end_s;
    return true;
  }
  *end_s = *start_s + rest_s;
  *next_step_s = *end_s;
  return true;
}

class Grid {
 public:
  Grid(double floors_w, const ReservationOptions& o)
      : floors_w_(floors_w),
        o_(o),
        extra_w_(static_cast<size_t>(std::max(1.0, std::floor(o.horizon_s / o.dt_s))), 0.0) {}

  // The grid points in [from_s, to_s) within the horizon.
  std::pair<size_t, size_t> Span(double from_s, double to_s) const {
    const double n = static_cast<double>(extra_w_.size());
    const double a = std::clamp(std::ceil(std::max(0.0, from_s) / o_.dt_s - 1e-9), 0.0, n);
    const double b = std::clamp(std::ceil(to_s / o_.dt_s - 1e-9), 0.0, n);
    return {static_cast<size_t>(a), static_cast<size_t>(std::max(a, b))};
  }
  bool Fits(double from_s, double to_s, double extra_w) const {
    const auto [a, b] = Span(from_s, to_s);
    for (size_t k = a; k < b; ++k) {
      if (floors_w_ + extra_w_[k] + extra_w > o_.budget_w + kFitTolW) return false;
    }
    return true;
  }
  void Add(double from_s, double to_s, double extra_w) {
    const auto [a, b] = Span(from_s, to_s);
    for (size_t k = a; k < b; ++k) extra_w_[k] += extra_w;
  }

 private:
  const double floors_w_;
  const ReservationOptions& o_;
  std::vector<double> extra_w_;  // reserved watts above the floors, per grid point
};

}  // namespace

ReservationPlan PlanReservations(const std::map<std::string, ReservationJob>& jobs,
                                 const ReservationOptions& o) {
  ReservationPlan plan;
  double floors_w = 0.0;
  for (const auto& [name, j] : jobs) floors_w += j.floor_w;
  Grid grid(floors_w, o);

  struct Update {
    double start_s, end_s, next_step_s;
    std::string job;
  };
  std::vector<Update> current;
  for (const auto& [name, j] : jobs) {
    plan.hold_s[name] = 0.0;
    Update u{0.0, 0.0, 0.0, name};
    if (!(j.update_w > j.floor_w + kFitTolW)) continue;  // its floor covers its update
    if (!CurrentUpdate(j.timeline, &u.start_s, &u.end_s, &u.next_step_s)) continue;
    current.push_back(u);
  }
  const auto place = [&](const std::string& job, double start_s, double end_s, bool next) {
    const ReservationJob& j = jobs.at(job);
    const double from_s = start_s - o.lead_s;
    const double extra_w = j.update_w - j.floor_w;
    if (from_s >= o.horizon_s) return true;  // beyond what is planned: nothing to decide
    if (!grid.Fits(from_s, end_s, extra_w)) return false;
    grid.Add(from_s, end_s, extra_w);
    plan.windows.push_back({job, from_s, end_s, j.update_w, next});
    if (from_s <= 0.0 && end_s > 0.0) plan.reserved_w[job] = j.update_w;
    return true;
  };

  // The updates of the steps in progress, in the order they start.
  std::sort(current.begin(), current.end(), [](const Update& a, const Update& b) {
    return std::tie(a.start_s, a.job) < std::tie(b.start_s, b.job);
  });
  for (const Update& u : current) {
    if (!place(u.job, u.start_s, u.end_s, false)) ++plan.unreserved;
  }
  // The next ones, in the order the next steps start: the least hold that fits.
  std::sort(current.begin(), current.end(), [](const Update& a, const Update& b) {
    return std::tie(a.next_step_s, a.job) < std::tie(b.next_step_s, b.job);
  });
  for (const Update& u : current) {
    const StepTimeline& t = jobs.at(u.job).timeline;
    if (t.held_left_s > 0.0) continue;  // held now: its next step's hold is decided
    const double rollout_s = std::max(0.0, t.rollout_s);
    const double rest_s = std::max(0.0, t.rest_s);
    bool placed = false;
    for (double h = 0.0; h <= o.max_hold_s + 1e-9; h += o.hold_step_s) {
      const double start_s = u.next_step_s + h + rollout_s;
      if (place(u.job, start_s, start_s + rest_s, true)) {
        plan.hold_s[u.job] = h;
        placed = true;
        break;
      }
    }
    if (!placed) ++plan.unreserved;
  }
  return plan;
}

}  // namespace headroom::coord
