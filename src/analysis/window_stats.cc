#include "analysis/window_stats.h"

#include <algorithm>
#include <cassert>

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
  if (k == k_) return;
  const Closed closed{k_, sum_w_ / static_cast<double>(count_),
                      t0_s_ + static_cast<double>(k_ + 1) * window_s_};
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
  if (budget_w_ && w.mean_w > *budget_w_) ++over_budget_;
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
  pending_.push_back(Closed{k_, sum_w_ / static_cast<double>(count_),
                            t0_s_ + static_cast<double>(k_ + 1) * window_s_});
  count_ = 0;
  const double limit_s = last_t_s_ + dt_s;
  for (const Closed& w : pending_) Decide(w, w.end_s <= limit_s);
  pending_.clear();
}

}  // namespace headroom::analysis
