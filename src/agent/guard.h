// --guard-power-limit: a hardware backstop under the workload controller. When the job's power
// per GPU stays above budget x (1 + margin) for `sustain` consecutive intervals, every GPU's
// power limit is set to the budget (once); Restore() puts back every limit it changed, to the
// value read before the first change. The agent calls Restore on exit, SIGTERM and SIGINT.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "telemetry/source.h"

namespace headroom::agent {

class PowerLimitGuard {
 public:
  using SetLimit = std::function<Status(int gpu, double limit_w)>;
  PowerLimitGuard(SetLimit set_limit, double budget_w, int sustain = 4, double margin = 0.02);

  // One interval's sample; `log` gets one line per action or failure.
  void Observe(const telemetry::Sample& sample, const std::function<void(const std::string&)>& log);
  // Restores every limit changed. Returns the first failure, after trying them all.
  Status Restore(const std::function<void(const std::string&)>& log);
  bool engaged() const { return engaged_; }

 private:
  SetLimit set_limit_;
  double budget_w_;
  int sustain_;
  double margin_;
  int over_ = 0;
  bool engaged_ = false;
  std::vector<std::optional<double>> original_w_;  // per GPU, read before any change
  std::vector<int> changed_;
};

}  // namespace headroom::agent
