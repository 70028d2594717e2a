// Baseline controllers: what an operator could use instead of a learned policy.
#pragma once

#include <optional>
#include <string>

#include "control/controller.h"
#include "control/limit_assist.h"
#include "control/over_budget.h"

namespace headroom::control {

// The trainer's default settings; the hardware limit at nameplate (none).
class Uncontrolled final : public Controller {
 public:
  Uncontrolled(int concurrency, int group_size) : c_(concurrency), g_(group_size) {}
  std::string_view name() const override { return "uncontrolled"; }
  Command Decide(const Inputs&) override { return {c_, g_, 0.0}; }

 private:
  int c_;
  int g_;
};

// A fixed setting (static-safe is the one a search found; see sim/search.h).
class Static final : public Controller {
 public:
  Static(std::string name, int concurrency, int group_size)
      : name_(std::move(name)), c_(concurrency), g_(group_size) {}
  std::string_view name() const override { return name_; }
  Command Decide(const Inputs&) override { return {c_, g_, 0.0}; }

 private:
  std::string name_;
  int c_;
  int g_;
};

// Workload-blind: the trainer's defaults with the hardware power limit set at the budget (the
// datacenter's reactive throttling; clocks fall in every phase).
class PowerCap final : public Controller {
 public:
  PowerCap(int concurrency, int group_size) : c_(concurrency), g_(group_size) {}
  std::string_view name() const override { return "power-cap"; }
  Command Decide(const Inputs& in) override { return {c_, g_, in.budget_w}; }

 private:
  int c_;
  int g_;
};

// PI control of concurrency on a log2 scale, with anti-windup.
//
//   e = (budget (1 - margin) - smoothed job power per GPU) / budget
//   u = clamp(I + kp e, log2 lo, log2 hi),  concurrency = round(2^u)
//   I += ki e interval_s, during rollout only (outside it concurrency moves no power), and only
//   while u is not saturated in the direction e pushes it (conditional integration); I stays in
//   [log2 lo, log2 hi].
// Group size stays at `group_size`. Gains come from a search (sim/search.h, docs/CONTROL.md).
// Hybrid: where concurrency has no authority (outside rollout, or at its floor) the power limit
// holds the budget (control/limit_assist.h), when the PID is given a nameplate and a floor.
struct PidGains {
  double kp = 4.0;
  double ki = 1.0;  // per second
  double margin = 0.05;
  LimitAssistRule assist;
};

class Pid final : public Controller {
 public:
  // nameplate_w and limit_min_w: the power limit's range; 0: no power limit (workload only).
  Pid(PidGains gains, Range concurrency, int start_concurrency, int group_size,
      double nameplate_w = 0.0, double limit_min_w = 0.0);
  std::string_view name() const override { return "pid"; }
  void Reset() override;
  Command Decide(const Inputs& in) override;
  const PidGains& gains() const { return gains_; }

 private:
  PidGains gains_;
  Range range_;
  int start_;
  int group_size_;
  double integral_ = 0.0;
  std::optional<LimitAssist> assist_;
};

// The safety shield around a learned controller.
//
// Rule: during rollout, when the smoothed job power per GPU (mean over its GPUs) stays above
// budget x (1 + margin) for `sustain` consecutive intervals, concurrency is forced to
// max(lo, floor(current x cut)) and may not rise for `hold_s`; each further sustained excess
// cuts again. Outside rollout the shield passes everything through (concurrency moves no power
// there). Group size and power limit pass through unchanged. See ShieldFor for policies scored
// over long windows.
//
// A budget decrease is a sustained excess by definition: when the budget in force falls and the
// job's power is above the new budget, concurrency is cut at once, and because work already
// admitted cannot be called back (lowering concurrency only stops admissions), the hardware
// power limit backs the cut: it is set to the budget in force (less the margin) until the phase
// changes (the admitted batch is done) or `decrease_cap_s` passes, then lifted. For `settle_s`
// after any decrease everything aims a margin below the new budget, and any excess over it cuts
// (and limits) at once. Outside rollout, concurrency is bounded by the last rollout's mean
// scaled by the budget since: the next rollout admits that many at once.
struct ShieldRule {
  double margin = 0.02;
  int sustain = 2;
  double cut = 0.5;
  double hold_s = 5.0;
  double decrease_cap_s = 30.0;  // the longest the power limit backs a decrease
  bool bound_admission = true;   // outside rollout, concurrency at most the last rollout's mean
  double settle_s = 10.0;        // after a decrease, how long everything aims a margin below
};

// The rule for a policy whose violations are scored over `window_s`: sustain grows to a quarter of
// that window (30 s scoring: 15 intervals of 0.5 s), so that noise a long window averages away
// does not trigger cuts. REQUIRES: interval_s > 0.
ShieldRule ShieldFor(double window_s, double interval_s, ShieldRule base = {});

class Shield final : public Controller {
 public:
  Shield(Controller& inner, ShieldRule rule, Range concurrency);
  std::string_view name() const override { return inner_.name(); }
  void Reset() override;
  Command Decide(const Inputs& in) override;
  int interventions() const { return interventions_; }

 private:
  Controller& inner_;
  ShieldRule rule_;
  Range range_;
  SustainedExcess excess_;
  double hold_until_s_ = -1.0;
  int ceiling_ = 0;
  int interventions_ = 0;
  double last_budget_w_ = 0.0;
  // The concurrency of the rollout under way or the last one (its mean), and its budget: what
  // bounds the concurrency set outside rollout, which the next rollout admits at once.
  double rollout_c_sum_ = 0.0;
  double rollout_budget_sum_w_ = 0.0;
  int rollout_decisions_ = 0;
  double admit_c_ = 0.0;
  double admit_budget_w_ = 0.0;
  // After a decrease: the power limit is held at the budget until this time or a phase change.
  double cap_until_s_ = -1.0;
  Phase cap_phase_ = Phase::kIdle;
  bool capped_ = false;
  double settle_until_s_ = -1.0;  // after a decrease: aiming a margin below the budget
};

}  // namespace headroom::control
