// Where the leader's plan starts each period (coordinator.h): the ledger key, else the ledger
// this replica kept of a store that lost its state, else the operator's target, else the flags
// (docs/SITE.md, "Operator requests are durable"). Coordinator's, in a file of their own.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "coord/coordinator.h"

namespace headroom::coord {

// Reads the ledger key, else lost_ledger_, else the operator's target, else the flags; writes
// lost_ledger_, status_.conflict and, for a rebuilt ledger, decrease_since_s_. Nothing when the
// ledger key cannot be read (it is not overwritten).
std::optional<Ledger> Coordinator::LedgerToPlanFrom(const LeadRead& site, double now_s) {
  if (site.ledger_kv != nullptr) return ReadLedger(*site.ledger_kv);
  if (lost_ledger_) return LedgerFromLost();
  Ledger ledger;
  if (site.target && site.target_kv != nullptr) {
    // A new ledger (the first, or one rebuilt after a loss) starts from the operator's last
    // target, not from this replica's flags.
    const Target& target = *site.target;
    ledger.site_budget_w = target.site_budget_w;
    ledger.target_site_budget_w = target.site_budget_w;
    ledger.reserve_w = target.reserve_w;
    ledger.target_revision = site.target_kv->mod_revision;
    log_(fmt::format(
        "a new ledger from the operator's last target (revision {}): site budget {:.1f} W, "
        "reserve {:.1f} W",
        site.target_kv->mod_revision, target.site_budget_w, target.reserve_w));
  } else {
    ledger.site_budget_w = config_.site_budget_w;
    ledger.target_site_budget_w = config_.site_budget_w;
    ledger.reserve_w = config_.reserve_w;
    log_(fmt::format(
        "a new ledger from the flags (no operator target): site budget {:.1f} W, reserve {:.1f} W",
        config_.site_budget_w, config_.reserve_w));
  }
  StartAtStoredGrants(site.in, now_s, &ledger);
  return ledger;
}

// Reads the ledger key's value; writes lost_ledger_ and status_.conflict (once, when the
// ledger's budget or reserve differs from our flags). Nothing when it cannot be read.
std::optional<Ledger> Coordinator::ReadLedger(const KeyValue& kv) {
  auto l = LedgerFromJson(kv.value, kv.key);
  if (!l) {
    // A ledger we cannot read is not overwritten: its held watts are unknown.
    NoteMalformed(kv, l.error());
    status_.last_error = l.error().message();
    return std::nullopt;
  }
  Ledger ledger = std::move(*l);
  lost_ledger_.reset();  // a ledger after the loss (another replica's): the site has one
  const bool budget_differs = std::abs(ledger.target_site_budget_w - config_.site_budget_w) > 1e-6;
  const bool reserve_differs = std::abs(ledger.TargetReserveW() - config_.reserve_w) > 1e-6;
  if ((budget_differs || reserve_differs) && status_.conflict.empty() && ledger.term != term_) {
    status_.conflict = fmt::format(
        "the ledger's site budget is {:.1f} W and reserve {:.1f} W, ours (--site-budget-w, "
        "--reserve-w) {:.1f} W and {:.1f} W: following the ledger",
        ledger.target_site_budget_w, ledger.TargetReserveW(), config_.site_budget_w,
        config_.reserve_w);
    log_.Warn(status_.conflict);
  }
  return ledger;
}

// Reads lost_ledger_ (set); writes nothing: the new ledger it starts.
Ledger Coordinator::LedgerFromLost() {
  // The store's state was lost: every job of the last ledger this replica held is kept at
  // its floor, as if its lease had expired (its agent, fenced, acts on its floor until it
  // registers again; forgotten after forget_after_s if it never does), and the budget and
  // reserve asked for last stay.
  Ledger ledger;
  ledger.site_budget_w = lost_ledger_->site_budget_w;
  ledger.target_site_budget_w = lost_ledger_->target_site_budget_w;
  ledger.reserve_w = lost_ledger_->reserve_w;
  ledger.target_reserve_w = lost_ledger_->target_reserve_w;
  for (const auto& [job, j] : lost_ledger_->jobs) {
    LedgerJob kept = j;
    kept.lease = 0;
    // A domain's jobs may still draw what it holds (plan.h, rule 1a): its held watts and grant
    // are kept until it registers again and acknowledges lower (found by
    // tests/site/chaos_domains.py: at its floor, the room it still used was granted to another
    // domain 3 s later).
    if (!kept.domain) kept.held_w = kept.grant_w = kept.floor_w;
    ledger.jobs[job] = kept;
  }
  for (const auto& [job, s] : lost_ledger_->standby) {
    if (s.duplicate) continue;
    StandbyJob kept = s;
    kept.lease = 0;
    ledger.standby[job] = kept;
  }
  log_(fmt::format(
      "a new ledger from the one held before the store's state was lost: site budget {:.1f} W, "
      "reserve {:.1f} W, {} jobs kept at their floors until they register again",
      ledger.site_budget_w, ledger.reserve_w, ledger.jobs.size()));
  return ledger;
}

// Reads the members, duplicates, unreadable members and stored grants; writes the new ledger's
// budget in force and decrease_since_s_ when the stored grants are above what it leaves.
void Coordinator::StartAtStoredGrants(const PlanInput& in, double now_s, Ledger* ledger) {
  // A ledger rebuilt while agents act on the deleted one's grants: the plan counts each at
  // its stored grant until the new epoch's grant replaces it. When those are more than the
  // budget leaves, the budget in force starts where they are and the budget asked for comes
  // into force as a decrease does, once the grants are down and acknowledged (chaos under
  // make test's load: a ledger deleted just after a cut put the cut in force over 4,057 W of
  // grants).
  double counted_w = 0.0;
  bool stored = false;
  for (const auto& [name, m] : in.members) {
    if (m.job_class != JobClass::kGuaranteed) continue;
    double w = StandbyChargeW(m);
    if (const auto g = in.grants.find(name);
        g != in.grants.end() && g->second.admitted && g->second.lease == m.lease) {
      w = std::max(w, g->second.job_budget_w);
      stored = true;
    }
    counted_w += w;
  }
  for (const auto& [name, m] : in.duplicates) counted_w += StandbyChargeW(m);
  // An unreadable member may act on its stored grant as well (unknown is not gone).
  for (const auto& [name, lease] : in.unreadable) {
    if (const auto g = in.grants.find(name);
        g != in.grants.end() && g->second.admitted && g->second.lease == lease) {
      counted_w += g->second.job_budget_w;
      stored = true;
    }
  }
  if (stored && counted_w + ledger->reserve_w > ledger->site_budget_w + 1e-6) {
    ledger->site_budget_w = counted_w + ledger->reserve_w;
    decrease_since_s_ = now_s;
    log_(
        fmt::format("the new ledger's budget in force is {:.1f} W until the grants stored "
                    "for the agents ({:.1f} W) come down to site budget {:.1f} W",
                    ledger->site_budget_w, counted_w, ledger->target_site_budget_w));
  }
}

}  // namespace headroom::coord
