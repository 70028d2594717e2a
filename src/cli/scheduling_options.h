// The site's scheduling options, the same for `headroom coordinator` and `headroom fleet-sim`
// (docs/SITE.md): --allocation, --fairness, --stagger, --max-hold-s.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "coord/plan.h"

namespace headroom::cli {

struct SchedulingArgs {
  std::string allocation = "proportional";
  std::string fairness = "none";
  std::string stagger = "none";
  double max_hold_s = 60.0;
};

void AddSchedulingOptions(CLI::App& app, SchedulingArgs* args);

struct Scheduling {
  coord::Allocation allocation = coord::Allocation::kProportional;
  coord::Fairness fairness = coord::Fairness::kNone;
  double max_hold_s = 0.0;       // 0: no staggering
  int stagger_passes = 1;        // 1: greedy; more: descent
  bool reserve_updates = false;  // --stagger reserve (coord/reservation.h)
};
Scheduling SchedulingOf(const SchedulingArgs& args);

// Sets a config's scheduling fields (coord::CoordinatorConfig's, site_sim::FleetSimConfig's:
// the same names) from the options.
template <typename Config>
void ApplyScheduling(const SchedulingArgs& args, Config* config) {
  const Scheduling scheduling = SchedulingOf(args);
  config->allocation = scheduling.allocation;
  config->fairness = scheduling.fairness;
  config->max_hold_s = scheduling.max_hold_s;
  config->stagger_passes = scheduling.stagger_passes;
  config->reserve_updates = scheduling.reserve_updates;
}

}  // namespace headroom::cli
