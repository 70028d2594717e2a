#include "coord/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "coord/plan_steps.h"

namespace headroom::coord {
namespace {
using plan_steps::kEpsW;
using plan_steps::PlanState;
}  // namespace

std::map<std::string, double> Allocate(double available_w,
                                       const std::map<std::string, AllocationJob>& jobs) {
  double floors_w = 0.0;
  double above_w = 0.0;
  for (const auto& [name, j] : jobs) {
    floors_w += j.floor_w;
    above_w += std::max(0.0, j.demand_w - j.floor_w);
  }
  const double rest_w = std::max(0.0, available_w - floors_w);
  // The same fraction of every job's demand above floor; at most all of it.
  const double fraction = above_w > 0.0 ? std::min(1.0, rest_w / above_w) : 0.0;
  std::map<std::string, double> out;
  for (const auto& [name, j] : jobs) {
    out[name] = j.floor_w + fraction * std::max(0.0, j.demand_w - j.floor_w);
  }
  return out;
}

double InvariantSlackW(const Ledger& ledger) {
  return ledger.site_budget_w - ledger.reserve_w - ledger.HeldW(JobClass::kGuaranteed) +
         kEpsW * static_cast<double>(ledger.jobs.size() + ledger.standby.size() + 1);
}

double RaisedW(const Ledger& before, const PlanOutput& after) {
  double raised_w = 0.0;
  for (const auto& [name, j] : after.ledger.jobs) {
    double was_w = 0.0;
    if (auto a = after.arrivals_w.find(name); a != after.arrivals_w.end()) {
      was_w = a->second;
    } else if (auto b = before.jobs.find(name); b != before.jobs.end()) {
      was_w = b->second.held_w;
    } else if (auto s = before.standby.find(name); s != before.standby.end()) {
      was_w = s->second.standby_w;
    }
    if (j.held_w > was_w + kEpsW) raised_w += j.held_w - was_w;
  }
  return raised_w;
}

namespace {

// What the ledger keeps of a live member for when its lease goes (LedgerJob::standby_w,
// step_s, holder): its standby, the longest step it has declared, a domain's holder. Whether
// any changed.
bool Remember(const Member& m, LedgerJob& j) {
  bool changed = false;
  if (m.domain && m.holder != j.holder) {
    j.holder = m.holder;
    changed = true;
  }
  if (m.standby_w >= 0.0 && std::abs(m.standby_w - j.standby_w) > kEpsW) {
    j.standby_w = m.standby_w;
    changed = true;
  }
  if (m.has_timeline) {
    const double step_s = std::ceil(m.timeline.rollout_s + m.timeline.rest_s);
    if (std::isfinite(step_s) && step_s > j.step_s) {
      j.step_s = step_s;
      changed = true;
    }
  }
  return changed;
}

// Whether duplicate `d` is its admitted job's agent restarted on the same machine: it names as
// replaced (seen gone there) the holder of the member the ledger addresses, with the same GPUs.
// Its GPUs are then the admitted job's, counted at least at its floor already.
bool ReplacesAdmittedHolder(const Member& d, const Ledger& l,
                            const std::map<std::string, Member>& members) {
  if (d.replaces.empty()) return false;
  const auto j = l.jobs.find(d.job);
  const auto m = members.find(d.job);
  return j != l.jobs.end() && m != members.end() && j->second.lease != 0 &&
         m->second.lease == j->second.lease && m->second.holder == d.replaces &&
         m->second.gpus == d.gpus;
}

// Whether duplicate `d` is another replica of the admitted domain of its name (the domain's new
// leader, registered while its old leader's lease lives on, or in the period that lease goes):
// a domain naming the holder the ledger keeps for it. What it declares is within what the
// domain holds already.
bool SameDomain(const Member& d, const Ledger& l) {
  if (!d.domain || d.holder.empty()) return false;
  const auto j = l.jobs.find(d.job);
  return j != l.jobs.end() && j->second.domain && j->second.holder == d.holder;
}

// 1, a lease gone: its agent has fenced itself to its floor. Reads and writes j; writes
// out.changed, log.
void FenceToFloor(PlanState& s, const std::string& name, LedgerJob& j) {
  if (j.lease == 0) return;
  if (j.domain) {
    // A domain's jobs may still draw what it holds (its coordinator killed, its agents acting
    // on their grants): kept, until it registers again and acknowledges lower.
    s.log.Warn(fmt::format("{}: domain lease {:x} gone: its held {:.1f} W kept until it "
                           "registers again and acknowledges lower",
                           name, j.lease, j.held_w),
               {{"job", name}, {"held_w", j.held_w}});
    j.lease = 0;
    s.out.changed = true;
    return;
  }
  s.log.Warn(fmt::format("{}: lease {:x} gone: held {:.1f} W -> floor {:.1f} W", name, j.lease,
                         j.held_w, j.floor_w),
             {{"job", name}, {"held_w", j.floor_w}});
  j.lease = 0;
  j.held_w = j.floor_w;
  j.grant_w = j.floor_w;
  s.out.changed = true;
}

// 1, no member: whether the job is forgotten now, its floor released (the caller erases it).
// Reads j, in.gone_for_s, in.forget_after_s; writes l.standby, out.forgotten, out.changed, log.
bool ForgetIfLongGone(PlanState& s, const std::string& name, const LedgerJob& j) {
  if (j.domain) return false;  // what it holds may still be drawn: never forgotten
  // Its agent fenced itself: the step under way ends on the floor, then it holds. The floor
  // goes once that step is certain to be over; its standby stays counted until it registers
  // again, or forget_after_s more (fenced means held).
  const auto gone = s.in.gone_for_s.find(name);
  const double forget_s = std::max(s.in.forget_after_s, kForgetSteps * j.step_s);
  if (gone != s.in.gone_for_s.end() && gone->second >= forget_s) {
    const double standby_w = j.standby_w >= 0.0 ? std::min(j.standby_w, j.floor_w) : j.floor_w;
    s.log.Info(fmt::format("{}: no member for {:.0f} s: forgotten, floor {:.1f} W released; "
                           "its standby {:.1f} W counted until it registers again or "
                           "for forget_after_s more",
                           name, gone->second, j.floor_w, standby_w),
               {{"job", name}, {"released_w", j.floor_w - standby_w}});
    if (j.job_class == JobClass::kGuaranteed && standby_w > kEpsW) {
      s.l.standby[name] = StandbyJob{standby_w, j.floor_w, 0, false, gone->second};
    }
    s.out.forgotten.push_back(name);
    s.out.changed = true;
    return true;
  }
  return false;
}

// 1, a domain's floor follows its member's (its jobs come and go): down at once (what it holds
// stays until it acknowledges lower), up into what it holds already, or else into what is free
// (until then the old floor stays). Whether it moved. Reads l's budget and sums, m; writes j,
// regrant, out.changed.
bool FollowDomainFloor(PlanState& s, const std::string& name, LedgerJob& j, const Member& m) {
  if (std::abs(m.floor_w - j.floor_w) <= kEpsW) return false;
  const Ledger& l = s.l;
  const double more_w = m.floor_w - j.held_w;  // above what it holds
  if (m.floor_w > j.floor_w && more_w > kEpsW) {
    const double budget_w = std::min(l.site_budget_w, l.target_site_budget_w) -
                            std::max(l.reserve_w, l.TargetReserveW());
    if (l.FloorsW() - j.floor_w + m.floor_w + l.StandbyW() > budget_w + kEpsW ||
        l.HeldW() + more_w > l.site_budget_w - l.reserve_w + kEpsW) {
      return false;
    }
    j.held_w += more_w;
  }
  j.floor_w = m.floor_w;
  if (j.grant_w < j.floor_w) {
    j.grant_w = j.floor_w;
    s.regrant[name] = true;
  }
  s.out.changed = true;
  return true;
}

// 1, a new incarnation takes the job's place: its floor was never released. A larger floor
// than the ledger's (another configuration) needs the difference free first: until then it
// waits. Reads l's budget and sums, m; writes j, regrant, out.changed, log.
void TakeJobsPlace(PlanState& s, const std::string& name, LedgerJob& j, const Member& m) {
  if (j.domain && m.domain) {
    // A domain's new lease (another replica leads it, or it registered again): what it holds
    // is its grant again, for the new lease; its floor follows.
    FollowDomainFloor(s, name, j, m);
    Remember(m, j);
    j.lease = m.lease;
    j.demand_w = std::max(m.demand_w, j.floor_w);
    s.regrant[name] = true;
    s.log.Info(fmt::format("{}: domain lease {:x} takes its place, holding {:.1f} W", name, j.lease,
                           j.held_w),
               {{"job", name}, {"held_w", j.held_w}});
    s.out.changed = true;
    return;
  }
  const Ledger& l = s.l;
  const double more_w = m.floor_w - j.floor_w;
  const double budget_w =
      std::min(l.site_budget_w, l.target_site_budget_w) - std::max(l.reserve_w, l.TargetReserveW());
  if (more_w > kEpsW && (l.FloorsW() + l.StandbyW() + more_w > budget_w + kEpsW ||
                         l.HeldW() + more_w > l.site_budget_w - l.reserve_w + kEpsW)) {
    s.log.Info(fmt::format("{}: lease {:x} waits: its floor {:.1f} W is {:.1f} W above the "
                           "job's, not free yet",
                           name, m.lease, m.floor_w, more_w),
               {{"job", name}});
    return;
  }
  if (more_w > kEpsW) {
    j.floor_w = m.floor_w;
    j.held_w += more_w;
    j.grant_w = std::max(j.grant_w, j.floor_w);
  }
  j.lease = m.lease;
  j.job_class = m.job_class;
  j.domain = m.domain;
  if (j.job_class == JobClass::kOpportunistic) j.floor_w = 0.0;  // it pauses at 0
  j.demand_w = std::max(m.demand_w, j.floor_w);
  s.regrant[name] = true;
  s.log.Info(fmt::format("{}: lease {:x} takes the job's place", name, j.lease), {{"job", name}});
  s.out.changed = true;
}

// 1, the lease the ledger addresses alive (or its key unreadable): an acknowledged grant lowers
// held to it; the member's demand, standby and longest step are kept. Reads in.acks, m (null:
// unreadable); writes j, out.changed.
void SettleAck(PlanState& s, const std::string& name, LedgerJob& j, const Member* m) {
  const auto a = s.in.acks.find(name);
  if (a != s.in.acks.end() && a->second.lease == j.lease && a->second.seq == j.seq &&
      j.held_w > j.grant_w) {
    j.held_w = j.grant_w;
    s.out.changed = true;
  }
  if (m != nullptr && j.domain) FollowDomainFloor(s, name, j, *m);
  // Compared as stored (never below the floor): a member whose demand is below a floor the
  // ledger kept larger would otherwise read as changed, and the ledger be written, every period.
  if (m != nullptr && std::abs(std::max(m->demand_w, j.floor_w) - j.demand_w) > kEpsW) {
    j.demand_w = std::max(m->demand_w, j.floor_w);
    s.out.changed = true;
  }
  if (m != nullptr) s.out.changed |= Remember(*m, j);
}

// 1. Acknowledgements, gone leases, new incarnations. Reads in.members, in.unreadable (and,
// through the steps above, in.acks, in.gone_for_s); writes l.jobs, l.standby (a job forgotten),
// out.forgotten, out.changed, regrant, log.
void SettleAcksAndLeases(PlanState& s) {
  const PlanInput& in = s.in;
  for (auto it = s.l.jobs.begin(); it != s.l.jobs.end();) {
    const std::string& name = it->first;
    LedgerJob& j = it->second;
    const auto m = in.members.find(name);
    // Unknown is not gone: the key lives on the lease the ledger addresses, its value unread.
    const auto u = in.unreadable.find(name);
    const bool unread = m == in.members.end() && u != in.unreadable.end();
    const bool unread_same_lease = unread && j.lease != 0 && u->second == j.lease;
    if (!unread_same_lease && (m == in.members.end() || m->second.lease != j.lease)) {
      // The lease the ledger addresses is gone (a member key is created only once the previous
      // one is deleted): that agent has fenced itself to its floor.
      FenceToFloor(s, name, j);
      if (unread) {
        // Another incarnation's key, unreadable: its floor stays held until it can be read.
      } else if (m == in.members.end()) {
        if (ForgetIfLongGone(s, name, j)) {
          it = s.l.jobs.erase(it);
          continue;
        }
      } else {
        TakeJobsPlace(s, name, j, m->second);
      }
    } else {
      SettleAck(s, name, j, m == in.members.end() ? nullptr : &m->second);
    }
    ++it;
  }
}

// 1b, the standby of a job whose key is gone (or admitted under its name meanwhile): a
// duplicate whose lease took the name goes at once; a fenced job's standby forget_after_s after
// its floor was forgotten; any other after forget_after_s, as an admitted job. Reads
// in.members, in.duplicates, in.unreadable, in.gone_for_s, l.jobs; writes l.standby,
// out.changed, log.
void ReleaseStandby(PlanState& s) {
  const PlanInput& in = s.in;
  Ledger& l = s.l;
  std::set<LeaseId> member_leases;  // of the members under their own names
  for (const auto& [name, m] : in.members) member_leases.insert(m.lease);
  for (auto it = l.standby.begin(); it != l.standby.end();) {
    const std::string& name = it->first;
    const StandbyJob& sb = it->second;
    const auto m = in.members.find(name);
    const auto d = in.duplicates.find(name);
    const bool present = (m != in.members.end() && !l.jobs.contains(name)) ||
                         d != in.duplicates.end() || in.unreadable.contains(name);
    if (present) {
      ++it;
      continue;
    }
    const auto gone = in.gone_for_s.find(name);
    const bool moved = sb.duplicate && member_leases.contains(sb.lease);
    const double keep_s =
        sb.fenced_gone_s >= 0.0 ? sb.fenced_gone_s + in.forget_after_s : in.forget_after_s;
    if (l.jobs.contains(name) || moved || (gone != in.gone_for_s.end() && gone->second >= keep_s)) {
      if (!l.jobs.contains(name)) {
        s.log.Info(fmt::format("{}: standby {:.1f} W released ({})", name, sb.standby_w,
                               moved ? "its agent took the name" : "no member"),
                   {{"job", name}, {"released_w", sb.standby_w}});
      }
      it = l.standby.erase(it);
      s.out.changed = true;
      continue;
    }
    ++it;
  }
}

// 1b, one registered job not admitted (or a duplicate) counted at what it may draw (a restarted
// agent of an admitted job: only above the job's floor). Reads l.jobs, in.members, in.grants;
// writes l.standby[name], out.arrivals_w, out.changed, log.
void ChargeStandby(PlanState& s, const std::string& name, const Member& m, bool duplicate) {
  Ledger& l = s.l;
  const double full_w = StandbyChargeW(m);
  const bool restart = duplicate && ReplacesAdmittedHolder(m, l, s.in.members);
  const bool same_domain = duplicate && SameDomain(m, l);
  double charge_w = restart       ? std::max(0.0, full_w - l.jobs.at(m.job).floor_w)
                    : same_domain ? std::max(0.0, full_w - l.jobs.at(m.job).held_w)
                                  : full_w;
  // A grant stored for its lease (a ledger deleted or rebuilt: its agent may act on it until
  // a grant of the new epoch replaces it) is what it may draw.
  if (const auto g = s.in.grants.find(name);
      !duplicate && g != s.in.grants.end() && g->second.admitted && g->second.lease == m.lease) {
    charge_w = std::max(charge_w, g->second.job_budget_w);
  }
  auto [it, fresh] = l.standby.try_emplace(name);
  StandbyJob& sb = it->second;
  if (fresh || sb.lease != m.lease || std::abs(sb.standby_w - charge_w) > kEpsW ||
      std::abs(sb.floor_w - m.floor_w) > kEpsW || sb.duplicate != duplicate) {
    if (fresh || sb.lease != m.lease) {
      s.log.Info(fmt::format("{}: registered (lease {:x}){}: counted at {:.1f} W until admitted{}",
                             name, m.lease, duplicate ? " under a name taken" : "", charge_w,
                             restart ? fmt::format(" (what its {:.1f} W adds to the floor of job "
                                                   "{}, whose gone agent it restarts)",
                                                   full_w, m.job)
                                     : ""),
                 {{"job", name}, {"counted_w", charge_w}});
      s.out.arrivals_w[name] = charge_w;
    }
    sb = {charge_w, m.floor_w, m.lease, duplicate, /*fenced_gone_s=*/-1.0};
    s.out.changed = true;
  }
}

// 1b, an unreadable member the ledger does not hold (the ledger deleted or rebuilt while its
// value could not be read): its agent may act on the grant stored for its lease, so that is
// counted until the value can be read (unknown is not gone). Its floor is unknown: it is not
// admitted. Reads in.unreadable, in.grants, l.jobs; writes l.standby, out.changed, log.
void ChargeUnreadable(PlanState& s) {
  Ledger& l = s.l;
  for (const auto& [name, lease] : s.in.unreadable) {
    if (l.jobs.contains(name)) continue;
    const auto g = s.in.grants.find(name);
    if (g == s.in.grants.end() || !g->second.admitted || g->second.lease != lease) continue;
    auto [it, fresh] = l.standby.try_emplace(name);
    StandbyJob& sb = it->second;
    const double charge_w = fresh || sb.lease != lease
                                ? g->second.job_budget_w
                                : std::max(sb.standby_w, g->second.job_budget_w);
    if (fresh || sb.lease != lease || std::abs(sb.standby_w - charge_w) > kEpsW) {
      s.log.Warn(fmt::format("{}: unreadable (lease {:x}): counted at its stored grant {:.1f} W "
                             "until it can be read",
                             name, lease, charge_w),
                 {{"job", name}, {"counted_w", charge_w}});
      sb = {charge_w, fresh ? charge_w : sb.floor_w, lease, false, /*fenced_gone_s=*/-1.0};
      s.out.changed = true;
    }
  }
}

// 1b. Every registered job not admitted, counted at what it may draw from its registration
// until it is admitted or forgotten. Reads in.members, in.duplicates, in.unreadable, in.grants,
// l.jobs; writes l.standby, out.arrivals_w, out.changed, log.
void CountStandby(PlanState& s) {
  ReleaseStandby(s);
  for (const auto& [name, m] : s.in.members) {
    if (s.l.jobs.contains(name) || m.job_class != JobClass::kGuaranteed) continue;
    ChargeStandby(s, name, m, false);
  }
  for (const auto& [name, m] : s.in.duplicates) ChargeStandby(s, name, m, true);
  ChargeUnreadable(s);
}

// An increase of the site budget, or a decrease of the reserve, is in force at once (a
// decrease of the budget, or an increase of the reserve, once it fits: step 5). Reads and
// writes l's budget and reserve; writes out.changed.
void ApplyBudgetIncrease(PlanState& s) {
  Ledger& l = s.l;
  if (l.target_site_budget_w > l.site_budget_w) {
    l.site_budget_w = l.target_site_budget_w;
    s.out.changed = true;
  }
  if (l.target_reserve_w >= 0.0 && l.target_reserve_w <= l.reserve_w) {
    l.reserve_w = l.target_reserve_w;
    l.target_reserve_w = -1.0;
    s.out.changed = true;
  }
}

// 2, a newcomer whose floor fits and is free: admitted at its floor (or at what it may draw
// already, a stored grant above it), moved out of standby (`sb`: its entry, or end). Writes
// l.jobs, l.standby, regrant, out.changed, log.
void AdmitAtFloor(PlanState& s, const std::string& name, const Member& m, double charge_w,
                  std::map<std::string, StandbyJob>::iterator sb) {
  LedgerJob j;
  j.floor_w = m.floor_w;
  j.demand_w = std::max(m.demand_w, m.floor_w);
  // What it may draw already (a stored grant above its floor) is its grant and held, until
  // the targets move it.
  j.held_w = std::max(m.floor_w, charge_w);
  j.grant_w = j.held_w;
  j.lease = m.lease;
  j.job_class = m.job_class;
  j.domain = m.domain;
  Remember(m, j);
  s.l.jobs[name] = j;
  if (sb != s.l.standby.end()) s.l.standby.erase(sb);
  s.regrant[name] = true;
  s.out.changed = true;
  s.log.Info(fmt::format("{}: admitted at its floor {:.1f} W", name, m.floor_w),
             {{"job", name}, {"floor_w", m.floor_w}});
}

// 2, a newcomer whose floor does not fit: refused, with the numbers; written only when the
// stored refusal differs. Reads in.grants, in.epoch, l's budget, alloc_reserve_w; writes l.seq,
// out.grants, out.changed, log.
void Refuse(PlanState& s, const std::string& name, const Member& m, double floors_w,
            double others_standby_w, double room_w) {
  Ledger& l = s.l;
  Grant g;
  g.job = name;
  g.term = s.term;
  g.epoch = s.in.epoch;
  g.lease = m.lease;
  g.admitted = false;
  g.reason = fmt::format(
      "not admitted: floor {:.1f} W does not fit in site budget {:.1f} W - reserve {:.1f} W "
      "- floors of running jobs {:.1f} W - standby of jobs not admitted {:.1f} W = {:.1f} W",
      m.floor_w, std::min(l.site_budget_w, l.target_site_budget_w), s.alloc_reserve_w, floors_w,
      others_standby_w, std::max(0.0, room_w));
  const auto stored = s.in.grants.find(name);
  if (stored == s.in.grants.end() || stored->second.admitted || stored->second.lease != g.lease ||
      stored->second.reason != g.reason || stored->second.epoch != g.epoch) {
    g.seq = ++l.seq;
    s.out.grants.push_back(g);
    s.out.changed = true;
    s.log.Warn(fmt::format("{}: {}", name, g.reason), {{"job", name}});
  }
}

// 2. Admission, in order of registration. A newcomer whose floor fits beside the admitted
// floors but not beside what they hold waits, its floor kept out of everyone's targets so
// that grants come down to make room for it. Reads in.members, in.registered_at, l; writes
// alloc_reserve_w, alloc_budget_w, waiting_w, log (and, admitting or refusing, the above's).
void Admit(PlanState& s) {
  Ledger& l = s.l;
  s.alloc_reserve_w = std::max(l.reserve_w, l.TargetReserveW());
  s.alloc_budget_w = std::min(l.site_budget_w, l.target_site_budget_w) - s.alloc_reserve_w;
  std::vector<std::pair<int64_t, std::string>> newcomers;
  for (const auto& [name, m] : s.in.members) {
    if (l.jobs.contains(name)) continue;
    const auto at = s.in.registered_at.find(name);
    newcomers.emplace_back(at == s.in.registered_at.end() ? 0 : at->second, name);
  }
  std::sort(newcomers.begin(), newcomers.end());
  for (const auto& [at, name] : newcomers) {
    const Member& m = s.in.members.at(name);
    const auto sb = l.standby.find(name);
    const double charge_w = sb == l.standby.end() ? 0.0 : sb->second.standby_w;
    const double floors_w = l.FloorsW();
    const double others_standby_w = l.StandbyW() - charge_w;
    const double room_w = s.alloc_budget_w - floors_w - others_standby_w - s.waiting_w;
    // The floor must fit beside the others' floors and standby, and beside what they hold now
    // (their acknowledged grants come down over the next periods; until then it waits). Its
    // own standby is held already: admission needs floor - standby more.
    if (m.floor_w <= room_w + kEpsW) {
      const double extra_w = std::max(0.0, m.floor_w - charge_w);
      const double free_w = l.site_budget_w - l.reserve_w - l.HeldW() - s.waiting_w;
      if (extra_w > kEpsW && extra_w > free_w + kEpsW) {
        s.log.Info(fmt::format("{}: floor {:.1f} W fits, waiting for {:.1f} W to be released", name,
                               m.floor_w, extra_w - std::max(0.0, free_w)),
                   {{"job", name}});
        s.waiting_w += extra_w;
        continue;
      }
      AdmitAtFloor(s, name, m, charge_w, sb);
    } else {
      Refuse(s, name, m, floors_w, others_standby_w, room_w);
    }
  }
}

}  // namespace

// One step per rule of plan.h, in its order; each says above it what it reads and writes (rules
// 3 to 5 and the grants written: plan_grants.cc).
PlanOutput Plan(const Ledger& read, const PlanInput& in, int64_t term) {
  using namespace plan_steps;  // NOLINT(google-build-using-namespace): the steps, by name
  PlanOutput out;
  out.ledger = read;
  const Logger log([&out](const LogEvent& e) { out.log.push_back(e); });
  PlanState s{.in = in, .term = term, .out = out, .l = out.ledger, .log = log};
  SettleAcksAndLeases(s);             // 1. acknowledgements, gone leases, new incarnations
  CountStandby(s);                    // 1b. every registered job not admitted at its standby
  ApplyBudgetIncrease(s);             // a budget increase (or a reserve decrease) in force at once
  Admit(s);                           // 2. admission, in order of registration
  SetTargets(s);                      // 3. targets (and loans)
  const Wants want = LowerGrants(s);  // 4. down first,
  RaiseGrants(s, want);               //    then up into the room
  ApplyBudgetDecrease(s);             // 5. a budget decrease in force once it fits
  RegrantChangedHolds(s);             // the grants to write: changed holds,
  RegrantDiffering(s);                // keys that differ from the ledger,
  WriteGrants(s);                     // and every one regranted
  if (out.changed) out.ledger.term = term;
  return out;
}

}  // namespace headroom::coord
