// The steps of coord::Plan (plan.h), shared by its two files: plan.cc (rules 1 and 2: leases,
// standby, admission, and Plan itself) and plan_grants.cc (rules 3 to 5 and the grants written).
// Internal to coord/: nothing outside plan*.cc includes it.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/log.h"
#include "coord/layout.h"
#include "coord/plan.h"

namespace headroom::coord::plan_steps {

inline constexpr double kEpsW = 1e-6;  // watts below this are rounding

// What the steps of one period share (plan.h numbers the rules they keep). Constant: the input
// and the term. Built: the next ledger and all else in `out`, the jobs whose grant must be
// (re)written, the budget the targets split and the floors waiting for room (step 2), the
// targets and the loans (step 3).
struct PlanState {
  const PlanInput& in;
  const int64_t term;
  PlanOutput& out;
  Ledger& l;                              // out.ledger: the next ledger
  const Logger& log;                      // into out.log
  std::map<std::string, bool> regrant{};  // jobs whose grant must be (re)written
  // Admit (2): the lower of the budget in force and the one asked for, less the larger reserve;
  // the floors of the newcomers waiting for room.
  double alloc_reserve_w = 0.0;
  double alloc_budget_w = 0.0;
  double waiting_w = 0.0;
  // SetTargets (3): every job's target; the loans, and whether the opportunistic jobs use them.
  std::map<std::string, double> target{};
  double loans_w = 0.0;
  bool lending = false;
};

// What the grants below their target want more, by class.
struct Wants {
  double guaranteed_w = 0.0;
  double opportunistic_w = 0.0;
};

// Rules 3 to 5 and the grants written (plan_grants.cc), in the order Plan calls them; each
// says where it is defined what it reads and writes.
void SetTargets(PlanState& s);                      // 3. targets (and loans)
Wants LowerGrants(PlanState& s);                    // 4. down first,
void RaiseGrants(PlanState& s, const Wants& want);  //    then up into the room
void ApplyBudgetDecrease(PlanState& s);             // 5. a budget decrease once it fits
void RegrantChangedHolds(PlanState& s);             // the grants to write: changed holds,
void RegrantDiffering(PlanState& s);                // keys that differ from the ledger,
void WriteGrants(PlanState& s);                     // and every one regranted

}  // namespace headroom::coord::plan_steps
