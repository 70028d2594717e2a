// Tumbling-window statistics of one time-ordered power series.
//
// Windows are aligned at the series' first time t0: window k holds the samples with
// floor((t - t0) / W + 1e-9) = k. A window's power is the plain mean of its samples. Against a
// fixed budget a window violates when its power is above it; against a moving one (a
// BudgetSchedule) when its power is above the budget's time-weighted mean over the window
// [t0 + kW, t0 + (k+1)W) (docs/METRICS.md, "A moving budget"). A window
// counts if it has at least one sample and its end t0 + (k+1) W <= the series' last time + dt.
// Because dt is only known once the whole trace is read, a window is decided as soon as a later
// sample reaches its end (it then counts for certain) and the rest at Finish(dt); memory stays
// constant.
//
// Not thread-safe: one writer.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "analysis/budget_schedule.h"

namespace headroom::analysis {

inline constexpr double kWindowEpsilon = 1e-9;  // tolerance in floor((t - t0) / W + 1e-9)

class WindowStats {
 public:
  // REQUIRES: window_s > 0.
  WindowStats(double window_s, std::optional<double> budget_w, bool track_ramp = false);
  // Against a budget that moves. REQUIRES: window_s > 0; `schedule` outlives this and holds
  // every change point up to the latest time added (it may grow meanwhile).
  WindowStats(double window_s, const BudgetSchedule* schedule);

  // REQUIRES: t_s does not decrease between calls.
  void Add(double t_s, double power_w) {
    if (samples_ == 0) {
      Start(t_s);
    } else if (t_s >= boundary_s_) {
      MaybeAdvance(t_s);
    }
    if (!pending_.empty()) ResolvePending(t_s);
    sum_w_ += power_w;
    ++count_;
    ++samples_;
    last_t_s_ = t_s;
  }

  // Adds n samples; the same as n calls of Add, faster.
  // REQUIRES: t_s non-decreasing, and not below the last time added.
  void AddBatch(const double* t_s, const double* power_w, size_t n);

  // Adds `polls` samples to each of `lane_count` series that share their times: series g gets
  // power_w[r * lane_count + g] at t_s[r]. The same as AddBatch on each series with its own
  // column, faster: the window arithmetic is done once for all. REQUIRES: every lane has been
  // given the same times so far; lane_count <= kMaxLanes; t_s as for AddBatch.
  static constexpr size_t kMaxLanes = 64;
  static void AddPolls(WindowStats* const* lanes, size_t lane_count, const double* t_s,
                       const double* power_w, size_t polls);

  // Decides the windows still open. REQUIRES: called once, after the last Add.
  void Finish(double dt_s);

  double window_s() const { return window_s_; }
  uint64_t counted() const { return counted_; }
  uint64_t over_budget() const { return over_budget_; }
  std::optional<double> max_power_w() const {
    return counted_ > 0 ? std::optional<double>(max_power_w_) : std::nullopt;
  }
  // Largest |P(k+1) - P(k)| / W over adjacent counted windows (track_ramp only).
  std::optional<double> max_ramp_w_per_s() const { return max_ramp_; }

  // The index of the window holding time t in a series starting at t0 (the one definition).
  // REQUIRES: t_s >= t0_s (then the argument of floor is positive and truncation is floor).
  static int64_t WindowIndex(double t_s, double t0_s, double window_s) {
    return static_cast<int64_t>((t_s - t0_s) / window_s + kWindowEpsilon);
  }

 private:
  struct Closed {
    int64_t k;
    double mean_w;
    double end_s;
  };
  Closed CloseOpen() const;
  void Start(double t_s);
  void MaybeAdvance(double t_s);
  // AddPolls for kLanes lanes (0: lane_count lanes).
  template <size_t kLanes>
  static void AddPollsOf(WindowStats* const* lanes, size_t lane_count, const double* t_s,
                         const double* power_w, size_t polls);
  // Closes the open window and opens window k (> k_), which holds t_s.
  void Advance(int64_t k, double t_s);
  void SetBoundary();
  void ResolvePending(double t_s);
  void Decide(const Closed& w, bool counted);

  // Constant after construction.
  double window_s_;
  std::optional<double> budget_w_;
  bool track_ramp_;
  const BudgetSchedule* schedule_ = nullptr;

  // The open window.
  double t0_s_ = 0.0;
  int64_t k_ = 0;
  double sum_w_ = 0.0;
  uint64_t count_ = 0;
  double boundary_s_ = 0.0;  // below this time a sample is certainly in window k_
  uint64_t samples_ = 0;
  double last_t_s_ = 0.0;
  std::vector<Closed> pending_;  // closed, not yet decided; at most a few

  // Results.
  uint64_t counted_ = 0;
  uint64_t over_budget_ = 0;
  double max_power_w_ = 0.0;
  std::optional<int64_t> prev_counted_k_;
  double prev_counted_w_ = 0.0;
  std::optional<double> max_ramp_;
};

}  // namespace headroom::analysis
