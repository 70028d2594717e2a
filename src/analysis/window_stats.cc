#include "analysis/window_stats.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "analysis/kernels.h"

namespace headroom::analysis {
namespace {

// Below this many windows the fast boundary test is safe: the rounding error of
// (t - t0) / W stays far below the 1e-6 window fraction kept as margin.
constexpr double kMaxFastWindows = 1e8;
constexpr double kBoundaryMargin = 1e-6;  // of a window

}  // namespace

WindowStats::WindowStats(double window_s, std::optional<double> budget_w, bool track_ramp)
    : window_s_(window_s), budget_w_(budget_w), track_ramp_(track_ramp) {
  assert(window_s > 0.0);
}

void WindowStats::Start(double t_s) {
  t0_s_ = t_s;
  k_ = 0;
  SetBoundary();
}

void WindowStats::SetBoundary() {
  const double next = static_cast<double>(k_ + 1);
  boundary_s_ = next < kMaxFastWindows ? t0_s_ + (next - kBoundaryMargin) * window_s_ : t0_s_;
}

void WindowStats::MaybeAdvance(double t_s) {
  const int64_t k = WindowIndex(t_s, t0_s_, window_s_);
  if (k != k_) Advance(k, t_s);
}

WindowStats::WindowStats(double window_s, const BudgetSchedule* schedule)
    : WindowStats(window_s, std::nullopt) {
  schedule_ = schedule;
}

WindowStats::Closed WindowStats::CloseOpen() const {
  return Closed{k_, sum_w_ / static_cast<double>(count_),
                t0_s_ + static_cast<double>(k_ + 1) * window_s_};
}

void WindowStats::Advance(int64_t k, double t_s) {
  const Closed closed = CloseOpen();
  // Usually the closing sample is past the window's end, so it counts now; otherwise (a sample
  // within rounding of the boundary) it waits for a later sample or for Finish. Decisions stay
  // in window order.
  if (pending_.empty() && closed.end_s <= t_s) {
    Decide(closed, /*counted=*/true);
  } else {
    pending_.push_back(closed);
  }
  k_ = k;
  sum_w_ = 0.0;
  count_ = 0;
  SetBoundary();
}

void WindowStats::AddBatch(const double* t_s, const double* power_w, size_t n) {
  if (n == 0) return;
  if (samples_ == 0) Start(t_s[0]);
  size_t i = 0;
  while (true) {
    // The run of samples certainly inside the open window.
    const double boundary_s = boundary_s_;
    size_t j = i;
    while (j < n && t_s[j] < boundary_s) ++j;
    sum_w_ += Sum(power_w + i, j - i);
    count_ += j - i;
    if (j == n) break;
    MaybeAdvance(t_s[j]);  // near or past the boundary: the exact test
    sum_w_ += power_w[j];
    ++count_;
    i = j + 1;
    if (i == n) break;
  }
  // A pending window counts once any sample reaches its end; decisions stay in window order.
  if (!pending_.empty()) ResolvePending(t_s[n - 1]);
  samples_ += n;
  last_t_s_ = t_s[n - 1];
}

void WindowStats::AddPolls(WindowStats* const* lanes, size_t lane_count, const double* t_s,
                           const double* power_w, size_t polls) {
  assert(lane_count <= kMaxLanes);
  if (polls == 0 || lane_count == 0) return;
  // The common node sizes get loops of a fixed length (unrolled and vectorised).
  switch (lane_count) {
    case 4:
      return AddPollsOf<4>(lanes, 4, t_s, power_w, polls);
    case 8:
      return AddPollsOf<8>(lanes, 8, t_s, power_w, polls);
    default:
      return AddPollsOf<0>(lanes, lane_count, t_s, power_w, polls);
  }
}

template <size_t kLanes>
void WindowStats::AddPollsOf(WindowStats* const* lanes, size_t lane_count_at_run_time,
                             const double* t_s, const double* power_w, size_t polls) {
  const size_t lane_count = kLanes > 0 ? kLanes : lane_count_at_run_time;
  WindowStats& lead = *lanes[0];
  if (lead.samples_ == 0) {
    for (size_t g = 0; g < lane_count; ++g) lanes[g]->Start(t_s[0]);
  }
  // Every lane has the same window arithmetic (t0, k, boundary, count, which windows counted);
  // only sums and what follows from them differ. Both live in locals here and go back to the
  // lanes at the end, or before a window that waits (a sample within rounding of the end).
  const double t0_s = lead.t0_s_;
  const double window_s = lead.window_s_;
  const bool track_ramp = lead.track_ramp_;
  const bool has_budget = lead.budget_w_.has_value() || lead.schedule_ != nullptr;
  const double budget_w = lead.budget_w_.value_or(0.0);
  const BudgetSchedule* schedule = lead.schedule_;  // the lanes share it
  double sum_w[kMaxLanes], max_w[kMaxLanes], prev_w[kMaxLanes], ramp[kMaxLanes];
  uint64_t over[kMaxLanes];
  int64_t k = 0;
  double boundary_s = 0.0;
  uint64_t count = 0, counted = 0;
  std::optional<int64_t> prev_k;
  bool has_ramp = false;
  const auto load = [&] {
    for (size_t g = 0; g < lane_count; ++g) {
      const WindowStats& w = *lanes[g];
      sum_w[g] = w.sum_w_;
      max_w[g] = w.max_power_w_;
      prev_w[g] = w.prev_counted_w_;
      ramp[g] = w.max_ramp_.value_or(0.0);
      over[g] = w.over_budget_;
    }
    k = lead.k_;
    boundary_s = lead.boundary_s_;
    count = lead.count_;
    counted = lead.counted_;
    prev_k = lead.prev_counted_k_;
    has_ramp = lead.max_ramp_.has_value();
  };
  const auto store = [&] {
    for (size_t g = 0; g < lane_count; ++g) {
      WindowStats& w = *lanes[g];
      w.sum_w_ = sum_w[g];
      w.max_power_w_ = max_w[g];
      w.prev_counted_w_ = prev_w[g];
      if (has_ramp) w.max_ramp_ = ramp[g];
      w.over_budget_ = over[g];
      w.k_ = k;
      w.boundary_s_ = boundary_s;
      w.count_ = count;
      w.counted_ = counted;
      w.prev_counted_k_ = prev_k;
    }
  };
  load();
  size_t i = 0;
  while (true) {
    size_t j = i;
    while (j < polls && t_s[j] < boundary_s) ++j;
    for (size_t r = i; r < j; ++r) {
      const double* row = power_w + r * lane_count;
      for (size_t g = 0; g < lane_count; ++g) sum_w[g] += row[g];
    }
    count += j - i;
    if (j == polls) break;
    // Near or past the boundary: the exact test, once for every lane.
    const double t = t_s[j];
    const int64_t next_k = WindowIndex(t, t0_s, window_s);
    if (next_k != k) {
      const double end_s = t0_s + static_cast<double>(k + 1) * window_s;
      if (lead.pending_.empty() && end_s <= t) {
        // The usual close: the window counts now (as Advance and Decide would decide it).
        const double n = static_cast<double>(count);
        const bool adjacent = track_ramp && prev_k && *prev_k + 1 == k;
        const double window_budget_w =
            schedule != nullptr ? schedule->MeanW(end_s - window_s, end_s) : budget_w;
        for (size_t g = 0; g < lane_count; ++g) {
          const double mean_w = sum_w[g] / n;
          max_w[g] = counted == 0 ? mean_w : std::max(max_w[g], mean_w);
          over[g] += has_budget && mean_w > window_budget_w;
          if (adjacent) {
            const double step = std::abs(mean_w - prev_w[g]) / window_s;
            ramp[g] = has_ramp ? std::max(ramp[g], step) : step;
          }
          prev_w[g] = mean_w;
          sum_w[g] = 0.0;
        }
        if (track_ramp) {
          has_ramp = has_ramp || adjacent;
          prev_k = k;
        }
        ++counted;
        count = 0;
        k = next_k;
        const double next = static_cast<double>(k + 1);
        boundary_s = next < kMaxFastWindows ? t0_s + (next - kBoundaryMargin) * window_s : t0_s;
      } else {
        store();
        for (size_t g = 0; g < lane_count; ++g) lanes[g]->Advance(next_k, t);
        load();
      }
    }
    const double* row = power_w + j * lane_count;
    for (size_t g = 0; g < lane_count; ++g) sum_w[g] += row[g];
    ++count;
    i = j + 1;
    if (i == polls) break;
  }
  store();
  for (size_t g = 0; g < lane_count; ++g) {
    WindowStats& w = *lanes[g];
    if (!w.pending_.empty()) w.ResolvePending(t_s[polls - 1]);
    w.samples_ += polls;
    w.last_t_s_ = t_s[polls - 1];
  }
}

void WindowStats::ResolvePending(double t_s) {
  // A window whose end a sample has reached counts: end <= t <= last time <= last time + dt.
  size_t done = 0;
  while (done < pending_.size() && pending_[done].end_s <= t_s) {
    Decide(pending_[done], /*counted=*/true);
    ++done;
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(done));
}

void WindowStats::Decide(const Closed& w, bool counted) {
  if (!counted) return;
  if (counted_ == 0 || w.mean_w > max_power_w_) max_power_w_ = w.mean_w;
  ++counted_;
  if (schedule_ != nullptr) {
    if (w.mean_w > schedule_->MeanW(w.end_s - window_s_, w.end_s)) ++over_budget_;
  } else if (budget_w_ && w.mean_w > *budget_w_) {
    ++over_budget_;
  }
  if (track_ramp_) {
    if (prev_counted_k_ && *prev_counted_k_ + 1 == w.k) {
      const double ramp = std::abs(w.mean_w - prev_counted_w_) / window_s_;
      max_ramp_ = max_ramp_ ? std::max(*max_ramp_, ramp) : ramp;
    }
    prev_counted_k_ = w.k;
    prev_counted_w_ = w.mean_w;
  }
}

void WindowStats::Finish(double dt_s) {
  if (samples_ == 0) return;
  pending_.push_back(CloseOpen());
  count_ = 0;
  const double limit_s = last_t_s_ + dt_s;
  for (const Closed& w : pending_) Decide(w, w.end_s <= limit_s);
  pending_.clear();
}

}  // namespace headroom::analysis
