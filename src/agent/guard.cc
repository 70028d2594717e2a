#include "agent/guard.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <vector>

namespace headroom::agent {

PowerLimitGuard::PowerLimitGuard(SetLimit set_limit, double budget_w, int sustain, double margin,
                                 Persist persist, Clear clear)
    : set_limit_(std::move(set_limit)),
      persist_(std::move(persist)),
      clear_(std::move(clear)),
      budget_w_(budget_w),
      sustain_(sustain),
      margin_(margin) {}

void PowerLimitGuard::SetBudget(double budget_w, const Logger& log) {
  if (budget_w == budget_w_) return;
  budget_w_ = budget_w;
  excess_.Reset();
  if (!engaged_) return;  // the controller's limit (Follow) does not follow the budget
  for (int gpu : changed_) {
    const double limit_w = std::min(budget_w_, *original_w_[static_cast<size_t>(gpu)]);
    if (auto st = set_limit_(gpu, limit_w); !st) {
      log.Error(fmt::format("guard: {}", st.error().message()), {{"gpu", gpu}});
      continue;
    }
    log.Info(fmt::format("guard: GPU {}: power limit -> {:.0f} W (the budget moved)", gpu, limit_w),
             {{"gpu", gpu}, {"limit_w", limit_w}});
  }
  written_w_ = budget_w_;
}

void PowerLimitGuard::Observe(const telemetry::Sample& sample, const Logger& log) {
  if (original_w_.empty()) {
    for (const auto& g : sample.gpus) original_w_.push_back(g.power_limit_w);
  }
  if (engaged_ || sample.gpus.empty()) return;
  // The shield's rule (control/over_budget.h): a GPU without a reading is left out of the mean.
  std::vector<std::optional<double>> readings;
  readings.reserve(sample.gpus.size());
  for (const auto& g : sample.gpus) readings.push_back(g.power_w);
  if (!excess_.Observe(control::JobPowerPerGpuW(readings), budget_w_, {margin_, sustain_})) return;
  engaged_ = true;
  std::vector<std::pair<int, double>> originals;
  for (size_t i = 0; i < sample.gpus.size(); ++i) {
    const int gpu = static_cast<int>(i);
    if (i >= original_w_.size() || !original_w_[i]) {
      log.Warn(fmt::format("guard: GPU {}: its power limit could not be read; left alone", gpu),
               {{"gpu", gpu}});
      continue;
    }
    originals.emplace_back(gpu, *original_w_[i]);
  }
  if (persist_ && !originals.empty()) {
    if (auto st = persist_(originals); !st) {
      log.Error(fmt::format("guard: {}; no power limit changed (the guard is off for this run)",
                            st.error().message()));
      return;
    }
  }
  for (const auto& [gpu, original_w] : originals) {
    const double limit_w = std::min(budget_w_, original_w);  // never above the original
    if (auto st = set_limit_(gpu, limit_w); !st) {
      log.Error(fmt::format("guard: {}", st.error().message()), {{"gpu", gpu}});
      continue;
    }
    if (std::find(changed_.begin(), changed_.end(), gpu) == changed_.end()) {
      changed_.push_back(gpu);
    }
    log.Warn(
        fmt::format("guard: GPU {}: power limit {:.0f} W -> {:.0f} W (power over budget for {} "
                    "intervals)",
                    gpu, original_w, limit_w, sustain_),
        {{"gpu", gpu}, {"original_limit_w", original_w}, {"limit_w", limit_w}});
  }
  written_w_ = budget_w_;  // what the GPUs hold now (Follow lowers it to the controller's)
  if (changed_.empty() && clear_ && persist_ && !originals.empty()) clear_();  // none changed
}

void PowerLimitGuard::Follow(double limit_w, const Logger& log) {
  follow_w_ = limit_w > 0.0 ? limit_w : 0.0;
  if (original_w_.empty()) return;  // no sample yet: the originals are unknown
  // What each GPU should hold: the controller's limit, the backstop's budget, or its original.
  double want_w = follow_w_;
  if (engaged_) want_w = want_w > 0.0 ? std::min(want_w, budget_w_) : budget_w_;
  if (want_w == written_w_) return;
  std::vector<std::pair<int, double>> originals;
  for (size_t i = 0; i < original_w_.size(); ++i) {
    if (original_w_[i]) originals.emplace_back(static_cast<int>(i), *original_w_[i]);
  }
  if (originals.empty()) return;
  if (want_w > 0.0 && !persisted_ && !engaged_ && persist_) {
    if (follow_off_) return;  // said once
    if (auto st = persist_(originals); !st) {
      log.Error(fmt::format("guard: {}; the controller's power limits are not written (this run)",
                            st.error().message()));
      follow_off_ = true;
      return;
    }
    persisted_ = true;
  }
  for (const auto& [gpu, original_w] : originals) {
    const double w = want_w > 0.0 ? std::min(want_w, original_w) : original_w;
    if (auto st = set_limit_(gpu, w); !st) {
      log.Error(fmt::format("guard: {}", st.error().message()), {{"gpu", gpu}});
      continue;
    }
    if (std::find(changed_.begin(), changed_.end(), gpu) == changed_.end()) {
      changed_.push_back(gpu);
    }
  }
  if (written_w_ == 0.0 || want_w == 0.0) {
    log.Info(want_w > 0.0
                 ? fmt::format("guard: power limit {:.0f} W per GPU (the controller's)", want_w)
                 : "guard: power limits back to their originals (the controller lifted its)",
             {{"limit_w", want_w}});
  }
  written_w_ = want_w;
}

Status PowerLimitGuard::Restore(const Logger& log) {
  Status first = OkStatus();
  for (int gpu : changed_) {
    const double w = *original_w_[static_cast<size_t>(gpu)];
    if (auto st = set_limit_(gpu, w); !st) {
      log.Error(fmt::format("guard: {}", st.error().message()), {{"gpu", gpu}});
      if (first) first = std::move(st);
      continue;
    }
    log.Info(fmt::format("guard: GPU {}: power limit restored to {:.0f} W", gpu, w),
             {{"gpu", gpu}, {"limit_w", w}});
  }
  changed_.clear();
  // Every limit is back: nothing left to restore.
  if (first && (engaged_ || persisted_) && clear_) clear_();
  written_w_ = 0.0;
  persisted_ = false;
  return first;
}

}  // namespace headroom::agent
