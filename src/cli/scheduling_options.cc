#include "cli/scheduling_options.h"

#include "cli/numbers.h"

namespace headroom::cli {

void AddSchedulingOptions(CLI::App& app, SchedulingArgs* a) {
  app.add_option("--allocation", a->allocation,
                 "How the watts above the floors are split: proportional (to demand above floor) "
                 "or value (water-filling on each job's value curve, demand by phase)")
      ->check(CLI::IsMember({"proportional", "value"}))
      ->capture_default_str();
  app.add_option("--fairness", a->fairness,
                 "With --allocation value: none, or max-min (every job the same fraction of its "
                 "attainable gain first)")
      ->check(CLI::IsMember({"none", "max-min"}))
      ->capture_default_str();
  app.add_option("--stagger", a->stagger,
                 "Phase staggering: none, greedy (each job's best hold before its next step, in "
                 "the order the steps start), descent (greedy repeated until nothing improves) or "
                 "reserve (each job's update reserved before it starts -- its grant raised to "
                 "the update's watts -- or the job held at its step boundary until one fits)")
      ->check(CLI::IsMember({"none", "greedy", "descent", "reserve"}))
      ->capture_default_str();
  app.add_option("--max-hold-s", a->max_hold_s, "The longest hold before a step (with --stagger)")
      ->check(Real(1.0, 3600.0))
      ->capture_default_str();
}

Scheduling SchedulingOf(const SchedulingArgs& a) {
  Scheduling s;
  s.allocation =
      a.allocation == "value" ? coord::Allocation::kValue : coord::Allocation::kProportional;
  s.fairness = a.fairness == "max-min" ? coord::Fairness::kMaxMin : coord::Fairness::kNone;
  s.max_hold_s = a.stagger == "none" ? 0.0 : a.max_hold_s;
  s.stagger_passes = a.stagger == "descent" ? 4 : 1;
  s.reserve_updates = a.stagger == "reserve";
  return s;
}

}  // namespace headroom::cli
