// The steps between consecutive samples of each GPU, pooled over GPUs: the median step `dt`,
// the trapezoid energy of the steps no longer than 5 dt, and the count of longer ones (gaps).
//
// Steps are kept as an exact histogram (step value -> count, summed area), so dt is the exact
// median and energy can exclude gaps although dt is only known at the end. Memory grows with
// the number of distinct step values, not with the number of samples: timestamps have a finite
// resolution, so a trace of any length has few distinct steps.
//
// Not thread-safe: one writer.
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <vector>

#include "common/error.h"

namespace headroom::analysis {

inline constexpr double kGapFactor = 5.0;  // a step longer than kGapFactor * dt is a gap

class StepStats {
 public:
  StepStats();

  // `count` steps of the same length (one per GPU), with their trapezoid areas (mean of the two
  // powers x step) summed in area_j. REQUIRES: step_s >= 0.
  void Add(double step_s, double area_j, uint64_t count = 1) {
    // Most steps hit their slot at the first probe: branch-light when steps alternate between a
    // few values (timestamps printed in decimal differ by an ulp from one step to the next).
    if (step_s == 0.0) step_s = 0.0;  // one key for +0 and -0
    Slot& slot = slots_[Hash(step_s)];
    if (slot.step_s == step_s) [[likely]] {
      slot.count += count;
      slot.area_j += area_j;
      return;
    }
    AddSlow(step_s, area_j, count);
  }

  // The steps of one GPU's run of samples t_s[0..n) (powers power_w), the first one from the
  // sample before the run (prev_t_s, prev_power_w). REQUIRES: t_s non-decreasing, >= prev_t_s.
  void AddRun(double prev_t_s, double prev_power_w, const double* t_s, const double* power_w,
              size_t n) {
    double t_prev = prev_t_s, p_prev = prev_power_w;
    for (size_t i = 0; i < n; ++i) {
      const double step_s = t_s[i] - t_prev;
      Add(step_s, 0.5 * (power_w[i] + p_prev) * step_s);
      t_prev = t_s[i];
      p_prev = power_w[i];
    }
  }

  struct Summary {
    std::optional<double> dt_s;  // none without any step
    double energy_j = 0.0;
    uint64_t gaps = 0;
    uint64_t steps = 0;
    uint64_t repeated = 0;  // steps of 0 s: a GPU's row at the time of its previous row
  };
  Summary Finish() const;

  size_t distinct_steps() const { return used_; }

 private:
  struct Slot {
    double step_s;
    uint64_t count;
    double area_j;
  };
  size_t Hash(double step_s) const {
    // Fibonacci hashing of the bit pattern.
    return static_cast<size_t>((std::bit_cast<uint64_t>(step_s) * 0x9E3779B97F4A7C15ull) >> 32) &
           (slots_.size() - 1);
  }
  void AddSlow(double step_s, double area_j, uint64_t count);
  void Grow();

  std::vector<Slot> slots_;  // open addressing; step_s < 0 marks an empty slot
  size_t used_ = 0;
};

// The trace's step dt (docs/TRACE_FORMAT.md "Repeated times"): the median step, or an error
// naming the repeated times when it is 0 s (most rows repeat their GPU's previous time, as a
// 10 Hz logger writing whole seconds does). `analyze`, `fleet` and `pilot` all take it from
// here. Fails too without any step.
Result<double> TraceStep(const StepStats::Summary& summary);

}  // namespace headroom::analysis
