// coord::Plan's rules 3 to 5 and the grants written (plan.h; the steps' state: plan_steps.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "coord/plan_steps.h"
#include "coord/stagger.h"
#include "coord/value_allocation.h"

namespace headroom::coord::plan_steps {
namespace {

// What a guaranteed job is expected to draw over the next lead_s, at most `cap_w` (what it may
// act on): all of it with no power published or no step timeline; else the most of its power
// now and its timeline's prediction (a rollout in progress at its power now: a rollout's power
// falls as its sequences finish), x (1 + margin).
double ExpectedDrawW(const LedgerJob& j, const Member* m, double cap_w, double lead_s,
                     double margin) {
  if (m == nullptr || m->lease != j.lease || !(m->power_w > 0.0) || !m->has_timeline) {
    return cap_w;
  }
  StepTimeline t = m->timeline;
  if (t.in_rollout) t.rollout_w = std::min(t.rollout_w, m->power_w);
  double w = m->power_w;
  for (double p : PredictPower(t, 0.0, lead_s, std::min(1.0, lead_s))) w = std::max(w, p);
  return std::min(cap_w, w * (1.0 + margin));
}

// 3, the floors the targets cover: a reserved update raises its job's floor (only here: the
// ledger's floor is the job's), unless the raised floors do not fit in guaranteed_available_w:
// then none is raised. Reads l.jobs, in.reserved_w; writes log.
std::map<std::string, double> TargetFloors(const PlanState& s, double guaranteed_available_w) {
  std::map<std::string, double> target_floor_w;
  double raised_floors_w = 0.0;
  for (const auto& [name, j] : s.l.jobs) {
    double f = j.floor_w;
    const auto r = s.in.reserved_w.find(name);
    if (r != s.in.reserved_w.end() && j.job_class == JobClass::kGuaranteed && j.lease != 0) {
      f = std::clamp(r->second, j.floor_w, std::max(j.floor_w, j.demand_w));
    }
    target_floor_w[name] = f;
    if (j.job_class == JobClass::kGuaranteed) raised_floors_w += f;
  }
  if (raised_floors_w > guaranteed_available_w + kEpsW) {
    if (!s.in.reserved_w.empty()) {
      s.log.Warn(
          fmt::format("reservations ignored: the raised floors ({:.1f} W) do not fit in "
                      "{:.1f} W",
                      raised_floors_w, guaranteed_available_w));
    }
    for (const auto& [name, j] : s.l.jobs) target_floor_w[name] = j.floor_w;
  }
  return target_floor_w;
}

// 3, class c's targets from available_w: Allocate, or AllocateByValue on the members' value
// curves (a straight line at its average value without one). Reads l.jobs, in.members,
// in.allocation, in.fairness.
std::map<std::string, double> TargetsOf(const PlanState& s,
                                        const std::map<std::string, double>& target_floor_w,
                                        JobClass c, double available_w) {
  if (s.in.allocation == Allocation::kValue) {
    std::map<std::string, ValueJob> value_jobs;
    for (const auto& [name, j] : s.l.jobs) {
      if (j.job_class != c) continue;
      ValueJob v;
      v.floor_w = target_floor_w.at(name);
      v.demand_w = j.lease == 0 ? j.floor_w : std::max(j.demand_w, v.floor_w);
      const auto m = s.in.members.find(name);
      if (j.lease != 0 && m != s.in.members.end() && m->second.lease == j.lease) {
        v.curve = m->second.value_curve;
        if (v.curve.empty()) {
          v.curve = {{v.floor_w, 0.0},
                     {v.demand_w, m->second.value_tokens_per_j * (v.demand_w - v.floor_w)}};
        }
      }
      value_jobs[name] = std::move(v);
    }
    return AllocateByValue(available_w, value_jobs, s.in.fairness);
  }
  std::map<std::string, AllocationJob> alloc_jobs;
  for (const auto& [name, j] : s.l.jobs) {
    if (j.job_class != c) continue;
    // A job with no member is held at its floor until it is back or forgotten.
    const double floor_w = target_floor_w.at(name);
    const double demand_w = j.lease == 0 ? j.floor_w : std::max(j.demand_w, floor_w);
    alloc_jobs[name] = {floor_w, demand_w};
  }
  return Allocate(available_w, alloc_jobs);
}

// 3, loans: what the guaranteed jobs are expected to leave undrawn, in a steady site only (no
// newcomer waiting, no budget decrease settling, no guaranteed grant waiting to rise); else 0.
// Reads l, in.members, in.loan_*, alloc_budget_w, waiting_w, the guaranteed targets.
double LoansW(const PlanState& s) {
  const Ledger& l = s.l;
  bool steady = s.waiting_w <= kEpsW && l.target_site_budget_w >= l.site_budget_w - kEpsW &&
                l.target_reserve_w < 0.0 && s.in.loan_lead_s > 0.0;
  double expected_w = 0.0, largest_unused_w = 0.0;
  for (const auto& [name, j] : l.jobs) {
    if (j.job_class != JobClass::kGuaranteed || !steady) continue;
    const double t = s.target.at(name);
    if (t > j.grant_w + kEpsW) steady = false;  // a grant waits to rise: no loans meanwhile
    const double cap_w = std::max(j.held_w, t);
    const auto m = s.in.members.find(name);
    const double e = ExpectedDrawW(j, m == s.in.members.end() ? nullptr : &m->second, cap_w,
                                   s.in.loan_lead_s, s.in.loan_margin);
    expected_w += e;
    largest_unused_w = std::max(largest_unused_w, cap_w - e);
  }
  if (!steady) return 0.0;
  return std::max(
      0.0, s.alloc_budget_w - l.StandbyW() - expected_w - s.in.loan_cover * largest_unused_w);
}

}  // namespace

// 3. Targets: the guaranteed jobs' from the budget less the reserve and the waiting floors;
// the opportunistic jobs' from what those targets leave, or the loans when more (docs/SITE.md,
// "Job classes"). Reads l, in, alloc_budget_w, waiting_w; writes target, loans_w, lending,
// out.opportunistic_pool_w, log.
void SetTargets(PlanState& s) {
  const Ledger& l = s.l;
  const double guaranteed_available_w = s.alloc_budget_w - s.waiting_w - l.StandbyW();
  const std::map<std::string, double> target_floor_w = TargetFloors(s, guaranteed_available_w);
  s.target = TargetsOf(s, target_floor_w, JobClass::kGuaranteed, guaranteed_available_w);
  double guaranteed_w = 0.0;
  for (const auto& [name, t] : s.target) guaranteed_w += t;
  // What the guaranteed targets leave; and what the guaranteed jobs are expected to leave
  // undrawn (loans), in a steady site only.
  const double left_w = std::max(0.0, s.alloc_budget_w - s.waiting_w - l.StandbyW() - guaranteed_w);
  s.loans_w = LoansW(s);
  s.lending = s.loans_w > left_w + kEpsW;
  s.out.opportunistic_pool_w = s.lending ? s.loans_w : left_w;
  for (const auto& [name, t] :
       TargetsOf(s, target_floor_w, JobClass::kOpportunistic, s.lending ? s.loans_w : left_w))
    s.target[name] = t;
}

// 4, down first: grants above their target are lowered at once (held stays until acked); a
// grant below its target and below what its job holds rises to the lower of the two at once.
// Reads target, in.no_raises; writes l.jobs' grant_w, regrant; returns what the others want
// above their grant.
Wants LowerGrants(PlanState& s) {
  Wants want;
  for (auto& [name, j] : s.l.jobs) {
    const double t = s.target.at(name);
    if (t < j.grant_w - kEpsW) {
      j.grant_w = t;
      s.regrant[name] = true;
    } else if (t > j.grant_w + kEpsW && j.held_w > j.grant_w + kEpsW && j.lease != 0 &&
               !s.in.no_raises) {
      // Below what it holds (a lower grant not acknowledged yet): up to that at once, from no
      // room -- held counts those watts already. Raised a share a period instead, each a new
      // seq, a member that acknowledges a period late (a domain) is never caught up with.
      j.grant_w = std::min(t, j.held_w);
      s.regrant[name] = true;
    }
    if (t > j.grant_w + kEpsW && j.lease != 0) {
      (j.job_class == JobClass::kGuaranteed ? want.guaranteed_w : want.opportunistic_w) +=
          t - j.grant_w;
    }
  }
  return want;
}

// 4, then up into the room (budget - reserve - held), the guaranteed jobs' wants first, then
// the opportunistic jobs' from what is left (or the loans), each in proportion to what it
// wants; a raised grant is held at once. Reads target, waiting_w, alloc_budget_w, loans_w,
// lending, in.no_raises; writes l.jobs' grant_w and held_w, l.reassignments, regrant.
void RaiseGrants(PlanState& s, const Wants& want) {
  Ledger& l = s.l;
  const double room_w = std::max(0.0, l.site_budget_w - l.reserve_w - l.HeldW() - s.waiting_w);
  const double room_alloc_w = std::max(0.0, s.alloc_budget_w - l.HeldW() - s.waiting_w);
  // The share of `want_w` that `room_w` covers, at most all of it.
  const auto covered = [](double room, double want_w) {
    return want_w > 0.0 ? std::min(1.0, room / want_w) : 0.0;
  };
  // A ledger just rebuilt raises nothing until every agent alive has had time to register.
  const double room_now_w = s.in.no_raises ? 0.0 : std::min(room_w, room_alloc_w);
  const double give_guaranteed = covered(room_now_w, want.guaranteed_w);
  double opportunistic_room_w = std::max(0.0, room_now_w - give_guaranteed * want.guaranteed_w);
  if (s.lending && !s.in.no_raises) {
    opportunistic_room_w =
        std::max(opportunistic_room_w, s.loans_w - l.HeldW(JobClass::kOpportunistic));
  }
  const double give_opportunistic = covered(opportunistic_room_w, want.opportunistic_w);
  if (!(give_guaranteed > 0.0 || give_opportunistic > 0.0)) return;
  for (auto& [name, j] : l.jobs) {
    const double t = s.target.at(name);
    if (!(t > j.grant_w + kEpsW) || j.lease == 0) continue;
    const double give_fraction =
        j.job_class == JobClass::kGuaranteed ? give_guaranteed : give_opportunistic;
    const double give_w = (t - j.grant_w) * give_fraction;
    if (give_w < 0.01) continue;  // below a hundredth of a watt: not worth a write
    j.grant_w += give_w;
    j.held_w = std::max(j.held_w, j.grant_w);
    s.regrant[name] = true;
    ++l.reassignments;
  }
}

// 5. A decrease of the budget less the reserve in force once the sum of held fits under it.
// Reads l.HeldW(); writes l's budget and reserve, out.changed, log.
void ApplyBudgetDecrease(PlanState& s) {
  Ledger& l = s.l;
  if (!((l.target_site_budget_w < l.site_budget_w || l.target_reserve_w > l.reserve_w) &&
        l.HeldW() <= l.target_site_budget_w - l.TargetReserveW() + kEpsW)) {
    return;
  }
  if (l.TargetReserveW() == l.reserve_w) {
    s.log.Info(fmt::format("site budget {:.1f} W -> {:.1f} W in force", l.site_budget_w,
                           l.target_site_budget_w),
               {{"site_budget_w", l.target_site_budget_w}});
  } else {
    s.log.Info(
        fmt::format("site budget {:.1f} W -> {:.1f} W, reserve {:.1f} W -> {:.1f} W in force",
                    l.site_budget_w, l.target_site_budget_w, l.reserve_w, l.TargetReserveW()),
        {{"site_budget_w", l.target_site_budget_w}, {"reserve_w", l.TargetReserveW()}});
  }
  l.site_budget_w = l.target_site_budget_w;
  l.reserve_w = l.TargetReserveW();
  l.target_reserve_w = -1.0;
  s.out.changed = true;
}

namespace {

// Staggering's hold for `name` (none: a default Hold).
PlanInput::Hold HoldOf(const PlanInput& in, const std::string& name) {
  const auto h = in.holds.find(name);
  return h == in.holds.end() ? PlanInput::Hold{} : h->second;
}

}  // namespace

// Holds: a changed one rewrites the grant (the watts unchanged). Reads l.jobs, in.holds,
// in.grants; writes regrant.
void RegrantChangedHolds(PlanState& s) {
  for (const auto& [name, j] : s.l.jobs) {
    if (j.lease == 0 || s.regrant.contains(name)) continue;
    const PlanInput::Hold h = HoldOf(s.in, name);
    const auto stored = s.in.grants.find(name);
    const bool stored_hold = stored != s.in.grants.end() && stored->second.hold_s > 0.0;
    if (h.hold_s <= 0.0 && !stored_hold) continue;  // no hold either way
    const bool same = stored != s.in.grants.end() && stored->second.lease == j.lease &&
                      std::abs(stored->second.hold_s - h.hold_s) < 1e-6 &&
                      stored->second.hold_step == h.hold_step;
    if (!same) s.regrant[name] = true;
  }
}

// Grant keys that differ from the ledger in any field it decides (a write lost with a leader,
// a hand edit, a forgery) are written again, with a sequence above every grant key's: an agent
// that took a key with a sequence above the ledger's (a rebuilt ledger, a forged key) follows
// the next grant instead of ignoring every later one. Reads in.grants, in.epoch, l.jobs; writes
// l.seq, regrant, out.changed, log.
void RegrantDiffering(PlanState& s) {
  Ledger& l = s.l;
  for (const auto& [name, g] : s.in.grants) {
    if (g.seq > l.seq) {
      s.log.Warn(
          fmt::format("{}: grant key's seq {} is above the ledger's {}: the sequence goes on "
                      "from it",
                      name, g.seq, l.seq),
          {{"job", name}});
      l.seq = g.seq;
      s.out.changed = true;
    }
  }
  for (const auto& [name, j] : l.jobs) {
    if (j.lease == 0 || s.regrant.contains(name)) continue;
    const auto stored = s.in.grants.find(name);
    const bool same = stored != s.in.grants.end() && stored->second.job == name &&
                      stored->second.lease == j.lease && stored->second.seq == j.seq &&
                      stored->second.epoch == s.in.epoch && stored->second.admitted &&
                      std::abs(stored->second.job_budget_w - j.grant_w) <= kEpsW;
    if (!same) s.regrant[name] = true;
  }
}

// Every job in regrant gets the next sequence and its grant (watts, hold) written. Reads
// regrant, l.jobs, in.holds, in.epoch, term; writes l.jobs' seq, l.seq, out.grants,
// out.changed.
void WriteGrants(PlanState& s) {
  Ledger& l = s.l;
  for (const auto& [name, yes] : s.regrant) {
    LedgerJob& j = l.jobs.at(name);
    j.seq = ++l.seq;
    Grant g;
    g.job = name;
    g.term = s.term;
    g.epoch = s.in.epoch;
    g.seq = j.seq;
    g.lease = j.lease;
    g.job_budget_w = j.grant_w;
    g.admitted = true;
    const PlanInput::Hold h = HoldOf(s.in, name);
    g.hold_s = h.hold_s;
    g.hold_step = h.hold_s > 0.0 ? h.hold_step : 0;
    s.out.grants.push_back(g);
    s.out.changed = true;
  }
}

}  // namespace headroom::coord::plan_steps
