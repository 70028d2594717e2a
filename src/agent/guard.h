// --guard-power-limit: a hardware backstop under the workload controller. When the job's power
// per GPU stays above budget x (1 + margin) for `sustain` consecutive intervals (the shield's
// rule, control/over_budget.h: a GPU without a reading is left out of the mean), every GPU's
// power limit is set to the budget (once); Restore() puts back every limit it changed, to the
// value read before the first change. The agent calls Restore on exit, SIGTERM and SIGINT,
// before anything else.
//
// Before it changes any limit the guard hands the originals to `persist` (the agent writes them
// to its state file, guard_state.h); when that fails it changes nothing. After a restore of
// every limit it calls `clear`. So a SIGKILL or an OOM kill between the two leaves a state file
// from which `headroom agent --restore-limits` (systemd's ExecStopPost) puts the limits back.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "control/over_budget.h"
#include "telemetry/source.h"

namespace headroom::agent {

class PowerLimitGuard {
 public:
  using SetLimit = std::function<Status(int gpu, double limit_w)>;
  // {sample position, original limit} of every GPU about to change.
  using Persist = std::function<Status(const std::vector<std::pair<int, double>>& originals)>;
  using Clear = std::function<void()>;
  PowerLimitGuard(SetLimit set_limit, double budget_w, int sustain = 4, double margin = 0.02,
                  Persist persist = nullptr, Clear clear = nullptr);

  // The budget per GPU from now on. Once engaged, the limits it set follow the budget (never
  // above a GPU's original limit).
  void SetBudget(double budget_w, const Logger& log);
  // One interval's sample; `log` gets one line per action or failure.
  void Observe(const telemetry::Sample& sample, const Logger& log);
  // Hybrid actuation: the controller's power limit per GPU from now on (0: none). Written to
  // every GPU whose original limit is known, never above that original, when it changes (the
  // originals persisted first, as for the backstop); while the backstop is engaged the lower of
  // the two holds; 0 puts the originals back unless the backstop holds them. Call after Observe.
  void Follow(double limit_w, const Logger& log);
  // Restores every limit changed. Returns the first failure, after trying them all.
  Status Restore(const Logger& log);
  bool engaged() const { return engaged_; }

 private:
  SetLimit set_limit_;
  Persist persist_;
  Clear clear_;
  double budget_w_;
  int sustain_;
  double margin_;
  control::SustainedExcess excess_;
  bool engaged_ = false;
  double follow_w_ = 0.0;    // the controller's limit (0: none)
  double written_w_ = 0.0;   // what Follow last wrote (0: the originals)
  bool persisted_ = false;   // the originals are in the state file
  bool follow_off_ = false;  // the state file could not be written: Follow writes nothing
  std::vector<std::optional<double>> original_w_;  // per GPU, read before any change
  std::vector<int> changed_;
};

}  // namespace headroom::agent
