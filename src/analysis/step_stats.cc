#include "analysis/step_stats.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include <fmt/format.h>

namespace headroom::analysis {
namespace {

constexpr size_t kInitialSlots = 64;
constexpr double kEmpty = -1.0;

}  // namespace

StepStats::StepStats() : slots_(kInitialSlots, Slot{kEmpty, 0, 0.0}) {}

void StepStats::AddSlow(double step_s, double area_j, uint64_t count) {
  const size_t mask = slots_.size() - 1;
  size_t i = Hash(step_s);
  while (true) {
    Slot& slot = slots_[i];
    if (slot.step_s == step_s) {
      slot.count += count;
      slot.area_j += area_j;
      return;
    }
    if (slot.step_s == kEmpty) {
      slot = Slot{step_s, count, area_j};
      ++used_;
      if (2 * used_ > slots_.size()) Grow();
      return;
    }
    i = (i + 1) & mask;
  }
}

void StepStats::Grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.size() * 2, Slot{kEmpty, 0, 0.0});
  const size_t mask = slots_.size() - 1;
  for (const Slot& slot : old) {
    if (slot.step_s == kEmpty) continue;
    size_t i = Hash(slot.step_s);
    while (slots_[i].step_s != kEmpty) i = (i + 1) & mask;
    slots_[i] = slot;
  }
}

StepStats::Summary StepStats::Finish() const {
  std::vector<Slot> used;
  used.reserve(used_);
  uint64_t total = 0;
  for (const Slot& slot : slots_) {
    if (slot.step_s == kEmpty) continue;
    used.push_back(slot);
    total += slot.count;
  }
  Summary summary;
  summary.steps = total;
  if (total == 0) return summary;
  std::sort(used.begin(), used.end(),
            [](const Slot& a, const Slot& b) { return a.step_s < b.step_s; });
  // The median of `total` values: the value of rank total/2 (0-based) when odd, else the mean of
  // ranks total/2 - 1 and total/2.
  const auto value_at_rank = [&](uint64_t rank) {
    uint64_t seen = 0;
    for (const Slot& slot : used) {
      seen += slot.count;
      if (rank < seen) return slot.step_s;
    }
    return used.back().step_s;
  };
  const double dt_s = total % 2 == 1
                          ? value_at_rank(total / 2)
                          : 0.5 * (value_at_rank(total / 2 - 1) + value_at_rank(total / 2));
  summary.dt_s = dt_s;
  if (used.front().step_s == 0.0) summary.repeated = used.front().count;
  const double gap_s = kGapFactor * dt_s;
  for (const Slot& slot : used) {
    if (slot.step_s > gap_s) {
      summary.gaps += slot.count;
    } else {
      summary.energy_j += slot.area_j;
    }
  }
  return summary;
}

Result<double> TraceStep(const StepStats::Summary& summary) {
  if (!summary.dt_s) return Error::Input("the trace needs at least two samples of one GPU");
  if (*summary.dt_s > 0.0) return *summary.dt_s;
  return Error::Input(fmt::format(
      "field 't_s': {} of {} steps repeat their GPU's previous time, so the median step is 0 s "
      "(times written more coarsely than the rows, e.g. whole seconds at 10 Hz?): keep one row "
      "per GPU and time, or write times at the sampling resolution",
      summary.repeated, summary.steps));
}

}  // namespace headroom::analysis
