#include "coord/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "coord/stagger.h"

namespace headroom::coord {
namespace {
constexpr double kEpsW = 1e-6;  // watts below this are rounding
}

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
// step_s): its standby, and the longest step it has declared. Whether either changed.
bool Remember(const Member& m, LedgerJob& j) {
  bool changed = false;
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

}  // namespace

PlanOutput Plan(const Ledger& read, const PlanInput& in, int64_t term) {
  PlanOutput out;
  Ledger& l = out.ledger;
  l = read;
  const Logger log([&out](const LogEvent& e) { out.log.push_back(e); });
  std::map<std::string, bool> regrant;  // jobs whose grant must be (re)written

  // 1. Acknowledgements, gone leases, new incarnations.
  for (auto it = l.jobs.begin(); it != l.jobs.end();) {
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
      if (j.lease != 0) {
        log.Warn(fmt::format("{}: lease {:x} gone: held {:.1f} W -> floor {:.1f} W", name, j.lease,
                             j.held_w, j.floor_w),
                 {{"job", name}, {"held_w", j.floor_w}});
        j.lease = 0;
        j.held_w = j.floor_w;
        j.grant_w = j.floor_w;
        out.changed = true;
      }
      if (unread) {
        // Another incarnation's key, unreadable: its floor stays held until it can be read.
      } else if (m == in.members.end()) {
        // Its agent fenced itself: the step under way ends on the floor, then it holds. The
        // floor goes once that step is certain to be over; its standby stays counted until it
        // registers again, or forget_after_s more (fenced means held).
        const auto gone = in.gone_for_s.find(name);
        const double forget_s = std::max(in.forget_after_s, kForgetSteps * j.step_s);
        if (gone != in.gone_for_s.end() && gone->second >= forget_s) {
          const double standby_w =
              j.standby_w >= 0.0 ? std::min(j.standby_w, j.floor_w) : j.floor_w;
          log.Info(fmt::format("{}: no member for {:.0f} s: forgotten, floor {:.1f} W released; "
                               "its standby {:.1f} W counted until it registers again or "
                               "for forget_after_s more",
                               name, gone->second, j.floor_w, standby_w),
                   {{"job", name}, {"released_w", j.floor_w - standby_w}});
          if (j.job_class == JobClass::kGuaranteed && standby_w > kEpsW) {
            l.standby[name] = StandbyJob{standby_w, j.floor_w, 0, false, gone->second};
          }
          out.forgotten.push_back(name);
          it = l.jobs.erase(it);
          out.changed = true;
          continue;
        }
      } else {
        // A new incarnation takes the job's place: its floor was never released. A larger
        // floor than the ledger's (another configuration) needs the difference free first.
        const double more_w = m->second.floor_w - j.floor_w;
        const double budget_w = std::min(l.site_budget_w, l.target_site_budget_w) -
                                std::max(l.reserve_w, l.TargetReserveW());
        if (more_w > kEpsW && (l.FloorsW() + l.StandbyW() + more_w > budget_w + kEpsW ||
                               l.HeldW() + more_w > l.site_budget_w - l.reserve_w + kEpsW)) {
          log.Info(fmt::format("{}: lease {:x} waits: its floor {:.1f} W is {:.1f} W above the "
                               "job's, not free yet",
                               name, m->second.lease, m->second.floor_w, more_w),
                   {{"job", name}});
          ++it;
          continue;
        }
        if (more_w > kEpsW) {
          j.floor_w = m->second.floor_w;
          j.held_w += more_w;
          j.grant_w = std::max(j.grant_w, j.floor_w);
        }
        j.lease = m->second.lease;
        j.job_class = m->second.job_class;
        if (j.job_class == JobClass::kOpportunistic) j.floor_w = 0.0;  // it pauses at 0
        j.demand_w = std::max(m->second.demand_w, j.floor_w);
        regrant[name] = true;
        log.Info(fmt::format("{}: lease {:x} takes the job's place", name, j.lease),
                 {{"job", name}});
        out.changed = true;
      }
    } else {
      const auto a = in.acks.find(name);
      if (a != in.acks.end() && a->second.lease == j.lease && a->second.seq == j.seq &&
          j.held_w > j.grant_w) {
        j.held_w = j.grant_w;
        out.changed = true;
      }
      if (m != in.members.end() && std::abs(m->second.demand_w - j.demand_w) > kEpsW) {
        j.demand_w = std::max(m->second.demand_w, j.floor_w);
        out.changed = true;
      }
      if (m != in.members.end()) out.changed |= Remember(m->second, j);
    }
    ++it;
  }

  // 1b. Every registered job not admitted, counted at what it may draw from its registration.
  std::set<LeaseId> member_leases;  // of the members under their own names
  for (const auto& [name, m] : in.members) member_leases.insert(m.lease);
  for (auto it = l.standby.begin(); it != l.standby.end();) {
    const std::string& name = it->first;
    const StandbyJob& s = it->second;
    const auto m = in.members.find(name);
    const auto d = in.duplicates.find(name);
    const bool present = (m != in.members.end() && !l.jobs.contains(name)) ||
                         d != in.duplicates.end() || in.unreadable.contains(name);
    if (present) {
      ++it;
      continue;
    }
    // Its key is gone (or admitted under its name meanwhile): a duplicate whose lease took the
    // name goes at once; a fenced job's standby forget_after_s after its floor was forgotten;
    // any other after forget_after_s, as an admitted job.
    const auto gone = in.gone_for_s.find(name);
    const bool moved = s.duplicate && member_leases.contains(s.lease);
    const double keep_s =
        s.fenced_gone_s >= 0.0 ? s.fenced_gone_s + in.forget_after_s : in.forget_after_s;
    if (l.jobs.contains(name) || moved || (gone != in.gone_for_s.end() && gone->second >= keep_s)) {
      if (!l.jobs.contains(name)) {
        log.Info(fmt::format("{}: standby {:.1f} W released ({})", name, s.standby_w,
                             moved ? "its agent took the name" : "no member"),
                 {{"job", name}, {"released_w", s.standby_w}});
      }
      it = l.standby.erase(it);
      out.changed = true;
      continue;
    }
    ++it;
  }
  const auto count_standby = [&](const std::string& name, const Member& m, bool duplicate) {
    const double full_w = StandbyChargeW(m);
    const bool restart = duplicate && ReplacesAdmittedHolder(m, l, in.members);
    double charge_w = restart ? std::max(0.0, full_w - l.jobs.at(m.job).floor_w) : full_w;
    // A grant stored for its lease (a ledger deleted or rebuilt: its agent may act on it until
    // a grant of the new epoch replaces it) is what it may draw.
    if (const auto g = in.grants.find(name);
        !duplicate && g != in.grants.end() && g->second.admitted && g->second.lease == m.lease) {
      charge_w = std::max(charge_w, g->second.job_budget_w);
    }
    auto [it, fresh] = l.standby.try_emplace(name);
    StandbyJob& s = it->second;
    if (fresh || s.lease != m.lease || std::abs(s.standby_w - charge_w) > kEpsW ||
        std::abs(s.floor_w - m.floor_w) > kEpsW || s.duplicate != duplicate) {
      if (fresh || s.lease != m.lease) {
        log.Info(fmt::format("{}: registered (lease {:x}){}: counted at {:.1f} W until admitted{}",
                             name, m.lease, duplicate ? " under a name taken" : "", charge_w,
                             restart ? fmt::format(" (what its {:.1f} W adds to the floor of job "
                                                   "{}, whose gone agent it restarts)",
                                                   full_w, m.job)
                                     : ""),
                 {{"job", name}, {"counted_w", charge_w}});
        out.arrivals_w[name] = charge_w;
      }
      s = {charge_w, m.floor_w, m.lease, duplicate, /*fenced_gone_s=*/-1.0};
      out.changed = true;
    }
  };
  for (const auto& [name, m] : in.members) {
    if (l.jobs.contains(name) || m.job_class != JobClass::kGuaranteed) continue;
    count_standby(name, m, false);
  }
  for (const auto& [name, m] : in.duplicates) count_standby(name, m, true);
  // An unreadable member the ledger does not hold (the ledger deleted or rebuilt while its value
  // could not be read): its agent may act on the grant stored for its lease, so that is counted
  // until the value can be read (unknown is not gone). Its floor is unknown: it is not admitted.
  for (const auto& [name, lease] : in.unreadable) {
    if (l.jobs.contains(name)) continue;
    const auto g = in.grants.find(name);
    if (g == in.grants.end() || !g->second.admitted || g->second.lease != lease) continue;
    auto [it, fresh] = l.standby.try_emplace(name);
    StandbyJob& s = it->second;
    const double charge_w = fresh || s.lease != lease
                                ? g->second.job_budget_w
                                : std::max(s.standby_w, g->second.job_budget_w);
    if (fresh || s.lease != lease || std::abs(s.standby_w - charge_w) > kEpsW) {
      log.Warn(fmt::format("{}: unreadable (lease {:x}): counted at its stored grant {:.1f} W "
                           "until it can be read",
                           name, lease, charge_w),
               {{"job", name}, {"counted_w", charge_w}});
      s = {charge_w, fresh ? charge_w : s.floor_w, lease, false, /*fenced_gone_s=*/-1.0};
      out.changed = true;
    }
  }

  // An increase of the site budget, or a decrease of the reserve, is in force at once (a
  // decrease of the budget, or an increase of the reserve, once it fits: step 5).
  if (l.target_site_budget_w > l.site_budget_w) {
    l.site_budget_w = l.target_site_budget_w;
    out.changed = true;
  }
  if (l.target_reserve_w >= 0.0 && l.target_reserve_w <= l.reserve_w) {
    l.reserve_w = l.target_reserve_w;
    l.target_reserve_w = -1.0;
    out.changed = true;
  }

  // 2. Admission, in order of registration. A newcomer whose floor fits beside the admitted
  // floors but not beside what they hold waits, its floor kept out of everyone's targets so
  // that grants come down to make room for it.
  const double alloc_reserve_w = std::max(l.reserve_w, l.TargetReserveW());
  const double alloc_budget_w = std::min(l.site_budget_w, l.target_site_budget_w) - alloc_reserve_w;
  double waiting_w = 0.0;
  std::vector<std::pair<int64_t, std::string>> newcomers;
  for (const auto& [name, m] : in.members) {
    if (l.jobs.contains(name)) continue;
    const auto at = in.registered_at.find(name);
    newcomers.emplace_back(at == in.registered_at.end() ? 0 : at->second, name);
  }
  std::sort(newcomers.begin(), newcomers.end());
  for (const auto& [at, name] : newcomers) {
    const Member& m = in.members.at(name);
    const auto sb = l.standby.find(name);
    const double charge_w = sb == l.standby.end() ? 0.0 : sb->second.standby_w;
    const double floors_w = l.FloorsW();
    const double others_standby_w = l.StandbyW() - charge_w;
    const double room_w = alloc_budget_w - floors_w - others_standby_w - waiting_w;
    // The floor must fit beside the others' floors and standby, and beside what they hold now
    // (their acknowledged grants come down over the next periods; until then it waits). Its
    // own standby is held already: admission needs floor - standby more.
    if (m.floor_w <= room_w + kEpsW) {
      const double extra_w = std::max(0.0, m.floor_w - charge_w);
      const double free_w = l.site_budget_w - l.reserve_w - l.HeldW() - waiting_w;
      if (extra_w > kEpsW && extra_w > free_w + kEpsW) {
        log.Info(fmt::format("{}: floor {:.1f} W fits, waiting for {:.1f} W to be released", name,
                             m.floor_w, extra_w - std::max(0.0, free_w)),
                 {{"job", name}});
        waiting_w += extra_w;
        continue;
      }
      LedgerJob j;
      j.floor_w = m.floor_w;
      j.demand_w = std::max(m.demand_w, m.floor_w);
      // What it may draw already (a stored grant above its floor) is its grant and held, until
      // the targets move it.
      j.held_w = std::max(m.floor_w, charge_w);
      j.grant_w = j.held_w;
      j.lease = m.lease;
      j.job_class = m.job_class;
      Remember(m, j);
      l.jobs[name] = j;
      if (sb != l.standby.end()) l.standby.erase(sb);
      regrant[name] = true;
      out.changed = true;
      log.Info(fmt::format("{}: admitted at its floor {:.1f} W", name, m.floor_w),
               {{"job", name}, {"floor_w", m.floor_w}});
    } else {
      Grant g;
      g.job = name;
      g.term = term;
      g.epoch = in.epoch;
      g.lease = m.lease;
      g.admitted = false;
      g.reason = fmt::format(
          "not admitted: floor {:.1f} W does not fit in site budget {:.1f} W - reserve {:.1f} W "
          "- floors of running jobs {:.1f} W - standby of jobs not admitted {:.1f} W = {:.1f} W",
          m.floor_w, std::min(l.site_budget_w, l.target_site_budget_w), alloc_reserve_w, floors_w,
          others_standby_w, std::max(0.0, room_w));
      const auto stored = in.grants.find(name);
      if (stored == in.grants.end() || stored->second.admitted || stored->second.lease != g.lease ||
          stored->second.reason != g.reason || stored->second.epoch != g.epoch) {
        g.seq = ++l.seq;
        out.grants.push_back(g);
        out.changed = true;
        log.Warn(fmt::format("{}: {}", name, g.reason), {{"job", name}});
      }
    }
  }

  // 3. Targets: the guaranteed jobs' from the budget less the reserve and the waiting floors;
  // the opportunistic jobs' from what those targets leave (docs/FLEET.md, "Job classes").
  // A reserved update raises its job's floor here (only here: the ledger's floor is the job's).
  const double guaranteed_available_w = alloc_budget_w - waiting_w - l.StandbyW();
  std::map<std::string, double> target_floor_w;
  {
    double raised_floors_w = 0.0;
    for (const auto& [name, j] : l.jobs) {
      double f = j.floor_w;
      const auto r = in.reserved_w.find(name);
      if (r != in.reserved_w.end() && j.job_class == JobClass::kGuaranteed && j.lease != 0) {
        f = std::clamp(r->second, j.floor_w, std::max(j.floor_w, j.demand_w));
      }
      target_floor_w[name] = f;
      if (j.job_class == JobClass::kGuaranteed) raised_floors_w += f;
    }
    if (raised_floors_w > guaranteed_available_w + kEpsW) {
      if (!in.reserved_w.empty()) {
        log.Warn(
            fmt::format("reservations ignored: the raised floors ({:.1f} W) do not fit in "
                        "{:.1f} W",
                        raised_floors_w, guaranteed_available_w));
      }
      for (const auto& [name, j] : l.jobs) target_floor_w[name] = j.floor_w;
    }
  }
  const auto targets_of = [&](JobClass c, double available_w) {
    if (in.allocation == Allocation::kValue) {
      std::map<std::string, ValueJob> value_jobs;
      for (const auto& [name, j] : l.jobs) {
        if (j.job_class != c) continue;
        ValueJob v;
        v.floor_w = target_floor_w.at(name);
        v.demand_w = j.lease == 0 ? j.floor_w : std::max(j.demand_w, v.floor_w);
        const auto m = in.members.find(name);
        if (j.lease != 0 && m != in.members.end() && m->second.lease == j.lease) {
          v.curve = m->second.value_curve;
          if (v.curve.empty()) {
            v.curve = {{v.floor_w, 0.0},
                       {v.demand_w, m->second.value_tokens_per_j * (v.demand_w - v.floor_w)}};
          }
        }
        value_jobs[name] = std::move(v);
      }
      return AllocateByValue(available_w, value_jobs, in.fairness);
    }
    std::map<std::string, AllocationJob> alloc_jobs;
    for (const auto& [name, j] : l.jobs) {
      if (j.job_class != c) continue;
      // A job with no member is held at its floor until it is back or forgotten.
      const double floor_w = target_floor_w.at(name);
      const double demand_w = j.lease == 0 ? j.floor_w : std::max(j.demand_w, floor_w);
      alloc_jobs[name] = {floor_w, demand_w};
    }
    return Allocate(available_w, alloc_jobs);
  };
  std::map<std::string, double> target = targets_of(JobClass::kGuaranteed, guaranteed_available_w);
  double guaranteed_w = 0.0;
  for (const auto& [name, t] : target) guaranteed_w += t;
  // What the guaranteed targets leave; and what the guaranteed jobs are expected to leave
  // undrawn (loans), in a steady site only.
  const double left_w = std::max(0.0, alloc_budget_w - waiting_w - l.StandbyW() - guaranteed_w);
  double loans_w = 0.0;
  bool steady = waiting_w <= kEpsW && l.target_site_budget_w >= l.site_budget_w - kEpsW &&
                l.target_reserve_w < 0.0 && in.loan_lead_s > 0.0;
  double expected_w = 0.0, largest_unused_w = 0.0;
  for (const auto& [name, j] : l.jobs) {
    if (j.job_class != JobClass::kGuaranteed || !steady) continue;
    const double t = target.at(name);
    if (t > j.grant_w + kEpsW) steady = false;  // a grant waits to rise: no loans meanwhile
    const double cap_w = std::max(j.held_w, t);
    const auto m = in.members.find(name);
    const double e = ExpectedDrawW(j, m == in.members.end() ? nullptr : &m->second, cap_w,
                                   in.loan_lead_s, in.loan_margin);
    expected_w += e;
    largest_unused_w = std::max(largest_unused_w, cap_w - e);
  }
  if (steady) {
    loans_w = std::max(
        0.0, alloc_budget_w - l.StandbyW() - expected_w - in.loan_cover * largest_unused_w);
  }
  const bool lending = loans_w > left_w + kEpsW;
  out.opportunistic_pool_w = lending ? loans_w : left_w;
  for (const auto& [name, t] : targets_of(JobClass::kOpportunistic, lending ? loans_w : left_w))
    target[name] = t;

  // 4. Down first, then up into the room: the guaranteed jobs' wants first, then the
  // opportunistic jobs' from what is left.
  double want_guaranteed_w = 0.0;
  double want_opportunistic_w = 0.0;
  for (auto& [name, j] : l.jobs) {
    const double t = target.at(name);
    if (t < j.grant_w - kEpsW) {
      j.grant_w = t;
      regrant[name] = true;
    } else if (t > j.grant_w + kEpsW && j.lease != 0) {
      (j.job_class == JobClass::kGuaranteed ? want_guaranteed_w : want_opportunistic_w) +=
          t - j.grant_w;
    }
  }
  const double room_w = std::max(0.0, l.site_budget_w - l.reserve_w - l.HeldW() - waiting_w);
  const double room_alloc_w = std::max(0.0, alloc_budget_w - l.HeldW() - waiting_w);
  // The share of `want_w` that `room_w` covers, at most all of it.
  const auto covered = [](double room, double want_w) {
    return want_w > 0.0 ? std::min(1.0, room / want_w) : 0.0;
  };
  // A ledger just rebuilt raises nothing until every agent alive has had time to register.
  const double room_now_w = in.no_raises ? 0.0 : std::min(room_w, room_alloc_w);
  const double give_guaranteed = covered(room_now_w, want_guaranteed_w);
  double opportunistic_room_w = std::max(0.0, room_now_w - give_guaranteed * want_guaranteed_w);
  if (lending && !in.no_raises) {
    opportunistic_room_w =
        std::max(opportunistic_room_w, loans_w - l.HeldW(JobClass::kOpportunistic));
  }
  const double give_opportunistic = covered(opportunistic_room_w, want_opportunistic_w);
  if (give_guaranteed > 0.0 || give_opportunistic > 0.0) {
    for (auto& [name, j] : l.jobs) {
      const double t = target.at(name);
      if (!(t > j.grant_w + kEpsW) || j.lease == 0) continue;
      const double give_fraction =
          j.job_class == JobClass::kGuaranteed ? give_guaranteed : give_opportunistic;
      const double give_w = (t - j.grant_w) * give_fraction;
      if (give_w < 0.01) continue;  // below a hundredth of a watt: not worth a write
      j.grant_w += give_w;
      j.held_w = std::max(j.held_w, j.grant_w);
      regrant[name] = true;
      ++l.reassignments;
    }
  }

  // 5. A decrease of the budget less the reserve in force once it fits.
  if ((l.target_site_budget_w < l.site_budget_w || l.target_reserve_w > l.reserve_w) &&
      l.HeldW() <= l.target_site_budget_w - l.TargetReserveW() + kEpsW) {
    if (l.TargetReserveW() == l.reserve_w) {
      log.Info(fmt::format("site budget {:.1f} W -> {:.1f} W in force", l.site_budget_w,
                           l.target_site_budget_w),
               {{"site_budget_w", l.target_site_budget_w}});
    } else {
      log.Info(
          fmt::format("site budget {:.1f} W -> {:.1f} W, reserve {:.1f} W -> {:.1f} W in force",
                      l.site_budget_w, l.target_site_budget_w, l.reserve_w, l.TargetReserveW()),
          {{"site_budget_w", l.target_site_budget_w}, {"reserve_w", l.TargetReserveW()}});
    }
    l.site_budget_w = l.target_site_budget_w;
    l.reserve_w = l.TargetReserveW();
    l.target_reserve_w = -1.0;
    out.changed = true;
  }
  // Holds: a changed one rewrites the grant (the watts unchanged).
  const auto hold_of = [&](const std::string& name) {
    const auto h = in.holds.find(name);
    return h == in.holds.end() ? PlanInput::Hold{} : h->second;
  };
  for (const auto& [name, j] : l.jobs) {
    if (j.lease == 0 || regrant.contains(name)) continue;
    const PlanInput::Hold h = hold_of(name);
    const auto stored = in.grants.find(name);
    const bool stored_hold = stored != in.grants.end() && stored->second.hold_s > 0.0;
    if (h.hold_s <= 0.0 && !stored_hold) continue;  // no hold either way
    const bool same = stored != in.grants.end() && stored->second.lease == j.lease &&
                      std::abs(stored->second.hold_s - h.hold_s) < 1e-6 &&
                      stored->second.hold_step == h.hold_step;
    if (!same) regrant[name] = true;
  }
  // Grant keys that differ from the ledger in any field it decides (a write lost with a
  // leader, a hand edit, a forgery) are written again, with a sequence above every grant key's:
  // an agent that took a key with a sequence above the ledger's (a rebuilt ledger, a forged
  // key) follows the next grant instead of ignoring every later one.
  for (const auto& [name, g] : in.grants) {
    if (g.seq > l.seq) {
      log.Warn(
          fmt::format("{}: grant key's seq {} is above the ledger's {}: the sequence goes on "
                      "from it",
                      name, g.seq, l.seq));
      l.seq = g.seq;
      out.changed = true;
    }
  }
  for (const auto& [name, j] : l.jobs) {
    if (j.lease == 0 || regrant.contains(name)) continue;
    const auto stored = in.grants.find(name);
    const bool same = stored != in.grants.end() && stored->second.job == name &&
                      stored->second.lease == j.lease && stored->second.seq == j.seq &&
                      stored->second.epoch == in.epoch && stored->second.admitted &&
                      std::abs(stored->second.job_budget_w - j.grant_w) <= kEpsW;
    if (!same) regrant[name] = true;
  }
  for (const auto& [name, yes] : regrant) {
    LedgerJob& j = l.jobs.at(name);
    j.seq = ++l.seq;
    Grant g;
    g.job = name;
    g.term = term;
    g.epoch = in.epoch;
    g.seq = j.seq;
    g.lease = j.lease;
    g.job_budget_w = j.grant_w;
    g.admitted = true;
    const PlanInput::Hold h = hold_of(name);
    g.hold_s = h.hold_s;
    g.hold_step = h.hold_s > 0.0 ? h.hold_step : 0;
    out.grants.push_back(g);
    out.changed = true;
  }
  if (out.changed) l.term = term;
  return out;
}

}  // namespace headroom::coord
