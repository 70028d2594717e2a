// One rule for "the power stays over the budget", shared by the shield (control/baselines.h)
// and the agent's hardware guard (agent/guard.h), so that they cannot disagree on what an excess
// is (docs/CONTROL.md, "Over budget"):
//
//   the job's power per GPU — the mean over the GPUs that have a reading — above
//   budget x (1 + margin) for `sustain` consecutive intervals.
//
// A GPU without a reading is left out of the mean, not counted as 0 W (which would hide an
// excess behind a lost sensor); an interval where no GPU has a reading is unknown: it neither
// extends a run nor breaks it.
#pragma once

#include <optional>
#include <span>

namespace headroom::control {

struct ExcessRule {
  double margin = 0.02;
  int sustain = 2;
};

// The job's power per GPU from per-GPU readings: the mean over those present; none: nullopt.
std::optional<double> JobPowerPerGpuW(std::span<const std::optional<double>> readings_w);

class SustainedExcess {
 public:
  // One interval. True when it completes a run of rule.sustain excesses; the run then starts
  // over (the caller acts once per run).
  bool Observe(std::optional<double> job_power_w, double budget_w, const ExcessRule& rule);
  int run() const { return run_; }
  void Reset() { run_ = 0; }

 private:
  int run_ = 0;
};

}  // namespace headroom::control
