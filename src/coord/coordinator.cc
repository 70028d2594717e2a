#include "coord/coordinator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "coord/reservation.h"

namespace headroom::coord {

Coordinator::Coordinator(Store& store, CoordinatorConfig config, std::function<double()> now_s,
                         Logger log, SiteFeed* feed)
    : store_(store),
      config_(std::move(config)),
      keys_(config_.site),
      now_s_(std::move(now_s)),
      log_(std::move(log)),
      lease_(store, config_.lease_ttl_s),
      own_feed_(feed != nullptr ? nullptr : std::make_unique<PolledFeed>(store, keys_.root)),
      feed_(feed != nullptr ? feed : own_feed_.get()) {}

namespace {

// A hold begun keeps its grant: no other for that step.
void KeepHoldBegun(const std::string& job, const Member& m, PlanInput* in) {
  const auto g = in->grants.find(job);
  if (m.timeline.held_left_s > 0.0 && g != in->grants.end()) {
    in->holds[job] = {g->second.hold_s, g->second.hold_step};
  }
}

// A plan's holds, each before its job's next step, where no hold begun is kept.
void AddHolds(const std::map<std::string, double>& hold_s,
              const std::map<std::string, Member>& members, PlanInput* in) {
  for (const auto& [job, h] : hold_s) {
    if (in->holds.contains(job)) continue;
    in->holds[job] = {h, h > 0.0 ? members.at(job).timeline.step + 1 : 0};
  }
}

}  // namespace

void Coordinator::PlanStagger(const Ledger& ledger, PlanInput* in) {
  std::map<std::string, StaggerJob> jobs;
  double tokens_per_s = 0.0, rollout_w = 0.0;
  for (const auto& [job, m] : in->members) {
    const auto j = ledger.jobs.find(job);
    if (j == ledger.jobs.end() || j->second.lease != m.lease || !m.has_timeline) continue;
    KeepHoldBegun(job, m, in);
    jobs[job] = {m.timeline, m.tokens_per_s};
    // Its tokens come in rollout: their rate there is the step's over the rollout's share.
    const double step_s = m.timeline.rollout_s + m.timeline.rest_s;
    if (m.timeline.rollout_s > 0.0) {
      tokens_per_s += m.tokens_per_s * step_s / m.timeline.rollout_s;
      rollout_w += m.timeline.rollout_w;
    }
  }
  if (jobs.empty()) return;
  StaggerOptions o;
  o.budget_w = std::min(ledger.site_budget_w, ledger.target_site_budget_w) -
               std::max(ledger.reserve_w, ledger.TargetReserveW());
  o.horizon_s = config_.stagger_horizon_s;
  o.max_hold_s = config_.max_hold_s;
  o.passes = config_.stagger_passes;
  // What a joule over the budget costs: the site's rollout tokens per joule (the average
  // value of a rollout watt; the marginal one is lower, so this errs towards holding).
  o.value_tokens_per_j = rollout_w > 0.0 ? tokens_per_s / rollout_w : 0.0;
  const StaggerPlan p = PlanHolds(jobs, o);
  status_.stagger_tokens_saved = p.tokens_saved;
  status_.stagger_peak_before_w = p.peak_before_w;
  status_.stagger_peak_after_w = p.peak_after_w;
  AddHolds(p.hold_s, in->members, in);
}

void Coordinator::PlanUpdateReservations(const Ledger& ledger, PlanInput* in) {
  std::map<std::string, ReservationJob> jobs;
  for (const auto& [job, m] : in->members) {
    const auto j = ledger.jobs.find(job);
    if (j == ledger.jobs.end() || j->second.lease != m.lease || !m.has_timeline ||
        j->second.job_class != JobClass::kGuaranteed) {
      continue;
    }
    KeepHoldBegun(job, m, in);
    // What its update draws unconstrained: as the member says, else as its timeline measured.
    jobs[job] = {m.timeline, j->second.floor_w, m.update_w > 0.0 ? m.update_w : m.timeline.rest_w};
  }
  // The opportunistic jobs' floors are 0: only the guaranteed ones and the standby count.
  ReservationOptions o;
  o.budget_w = std::min(ledger.site_budget_w, ledger.target_site_budget_w) -
               std::max(ledger.reserve_w, ledger.TargetReserveW()) - ledger.StandbyW();
  o.lead_s = config_.reservation_lead_s > 0.0 ? config_.reservation_lead_s : 3.0 * config_.period_s;
  o.horizon_s = config_.stagger_horizon_s;
  o.max_hold_s = config_.max_hold_s;
  const ReservationPlan p = PlanReservations(jobs, o);
  in->reserved_w = p.reserved_w;
  status_.reserved_jobs = static_cast<int>(p.reserved_w.size());
  status_.unreserved_updates = p.unreserved;
  AddHolds(p.hold_s, in->members, in);
}

double ReserveShortW(const CoordinatorStatus& s) {
  if (!s.ledger) return 0.0;
  return std::max(0.0, s.largest_arrival_standby_w - s.ledger->reserve_w);
}

void Coordinator::NoteArrivals(const PlanOutput& plan) {
  const double reserve_w = plan.ledger.reserve_w;
  for (const auto& [job, standby_w] : plan.arrivals_w) {
    status_.largest_arrival_standby_w = std::max(status_.largest_arrival_standby_w, standby_w);
    if (standby_w <= reserve_w + 1e-6) continue;
    const auto s = plan.ledger.standby.find(job);
    const LeaseId lease = s != plan.ledger.standby.end() ? s->second.lease : 0;
    // A plan not written is made again next period, with the same arrival: warned once.
    const auto [warned, fresh] = arrivals_warned_.try_emplace(job, lease);
    if (!fresh && warned->second == lease) continue;
    warned->second = lease;
    log_.Warn(fmt::format("reserve {:.1f} W does not cover job '{}': it draws {:.1f} W before "
                          "admission, without asking: the site may be {:.1f} W over its budget "
                          "until grants come down (a reserve of at least {:.1f} W covers it)",
                          reserve_w, job, standby_w, standby_w - reserve_w, standby_w),
              {{"job", job},
               {"standby_w", standby_w},
               {"reserve_w", reserve_w},
               {"reserve_short_w", standby_w - reserve_w}});
  }
  for (auto it = arrivals_warned_.begin(); it != arrivals_warned_.end();) {
    it = plan.ledger.standby.contains(it->first) ? std::next(it) : arrivals_warned_.erase(it);
  }
}

void Coordinator::StepDown(const std::string& why, bool lost) {
  if (term_ != 0) {
    log_.Warn(fmt::format("leadership of term {} lost: {}", term_, why),
              {{"site", config_.site}, {"term", term_}});
    if (lost) ++status_.leadership_lost;
  }
  term_ = 0;
  status_.role = "candidate";
  status_.term = 0;
  decrease_since_s_.reset();  // (a request is in the target key: the next leader applies it)
}

bool Coordinator::KeepLease(double now_s) {
  if (auto kept = lease_.RenewIfDue(now_s); !kept) {
    if (IsLeaseGone(kept.error())) {
      StepDown("our lease expired");  // (the lease is forgotten: a new one below)
    } else {
      status_.last_error = kept.error().message();
      // Unreachable: we may no longer lead. Our writes are conditioned on the term, so a stale
      // leader writes nothing; stop trying until the lease is confirmed.
      if (now_s - lease_.renewed_s() >= static_cast<double>(config_.lease_ttl_s)) {
        StepDown("the store unreachable for a lease TTL");
      }
      return false;
    }
  }
  if (!lease_.held()) {
    if (auto granted = lease_.Grant(now_s); !granted) {
      status_.last_error = granted.error().message();
      return false;
    }
  }
  return true;
}

void Coordinator::Step() {
  const double now_s = now_s_();
  if (!KeepLease(now_s)) return;
  if (term_ == 0) {
    // Campaign: the leader key, created only if absent, on our lease.
    TxnRequest campaign;
    campaign.compare.push_back(Compare::CreateRevision(keys_.leader(), Compare::Result::kEqual, 0));
    const std::string value =
        fmt::format(R"({{"id":"{}","listen":"{}"}})", config_.id, config_.listen);
    campaign.success.push_back(Op::Put(keys_.leader(), value, lease_.id()));
    campaign.failure.push_back(Op::Get(keys_.leader()));
    auto r = store_.Txn(campaign);
    if (!r) {
      status_.last_error = r.error().message();
      return;  // an unknown outcome resolves itself below next period (the key's lease is ours)
    }
    if (r->succeeded) {
      term_ = r->revision;
      Wrote(r->revision);
      log_.Info(fmt::format("leading site '{}', term {}", config_.site, term_),
                {{"site", config_.site}, {"term", term_}});
    } else if (!r->responses.empty() && !r->responses[0].empty()) {
      const KeyValue& kv = r->responses[0][0];
      if (kv.lease == lease_.id()) {
        term_ = kv.create_revision;  // our own campaign, whose reply was lost
        log_.Info(fmt::format("leading site '{}', term {}", config_.site, term_),
                  {{"site", config_.site}, {"term", term_}});
      } else {
        status_.role = "follower";
        status_.leader = kv.value;
        Follow();
        return;
      }
    } else {
      return;
    }
    status_.role = "leader";
    status_.term = term_;
    ++status_.elections_won;
    status_.leader = config_.id;
    gone_since_s_.clear();  // a new leader counts absences afresh (later, never sooner)
  }
  Lead(now_s);
}

bool Coordinator::SeesStateLost(int64_t revision) {
  // The store's revision never goes back in one history: when it does, the store's state was
  // lost (a new cluster, or restored from an older snapshot). What was learnt from the old
  // history goes with it.
  const int64_t before = max_revision_seen_;
  max_revision_seen_ = std::max(max_revision_seen_, revision);
  if (before == 0 || revision >= before) return false;
  max_revision_seen_ = revision;
  log_.Warn(
      fmt::format("the store's revision went back from {} to {}: its state was lost; "
                  "starting afresh",
                  before, revision));
  revisions_seen_.clear();
  // The last ledger this replica held or read: its jobs may still draw their floors, and the
  // operator's last budget is in it. The new ledger starts from it, whichever replica leads.
  if (status_.ledger) lost_ledger_ = status_.ledger;
  compacted_to_ = 0;
  status_.compacted_to = 0;
  written_revision_ = std::min(written_revision_, revision);  // the old history's are gone
  members_parsed_.Clear();
  acks_parsed_.Clear();
  grants_parsed_.Clear();
  list_again_ = true;  // the view, and what was parsed of it, came from the old history
  gone_since_s_.clear();
  malformed_seen_.clear();
  ++status_.store_resets;
  return true;
}

void Coordinator::Follow() {
  auto r = store_.Get(keys_.ledger(), /*prefix=*/false);
  if (!r) {
    status_.last_error = r.error().message();
    return;
  }
  SeesStateLost(r->revision);
  if (r->kvs.empty()) return;  // deleted, or lost with the state: the last one read stays
  auto l = LedgerFromJson(r->kvs[0].value, r->kvs[0].key);
  if (!l) return;  // the leader logs and keeps it; the last one read stays
  status_.ledger = std::move(*l);
  lost_ledger_.reset();  // a ledger after the loss: the site has one again
}

// Brings the view up to date; compacts the history, parses the view (ReadSite), picks the
// ledger to plan from, applies the operator's target, notes absences, plans, and writes the
// plan when it changed and keeps the invariant.
void Coordinator::Lead(double now_s) {
  if (!ReadView()) return;
  SeesStateLost(view_.revision());
  CompactHistory(now_s, view_.revision());
  std::optional<LeadRead> site = ReadSite(view_.kvs(), now_s);
  if (!site) return;
  std::optional<Ledger> ledger = LedgerToPlanFrom(*site, now_s);
  if (!ledger) return;
  const bool target_changed = ApplyTarget(*site, now_s, &*ledger);
  NoteAbsences(*ledger, now_s, &site->in);
  if (config_.reserve_updates) {
    PlanUpdateReservations(*ledger, &site->in);
  } else if (config_.max_hold_s > 0.0) {
    PlanStagger(*ledger, &site->in);
  }
  // Grants carry the ledger's epoch: its key's create_revision, unknown until a new ledger is
  // written (then its grants follow in the next period).
  site->in.epoch = site->ledger_kv != nullptr ? site->ledger_kv->create_revision : 0;
  // A ledger this replica creates (the first, or one rebuilt after a deletion or the store's
  // state lost) raises nothing for a lease TTL and two periods: agents that lost their lease
  // with the old store act on their floors until they register again.
  if (site->ledger_kv == nullptr) created_ledger_s_ = now_s;
  site->in.no_raises =
      now_s - created_ledger_s_ < static_cast<double>(config_.lease_ttl_s) + 2.0 * config_.period_s;
  PlanOutput plan = Plan(*ledger, site->in, term_);
  NoteArrivals(plan);
  if (site->ledger_kv == nullptr) {
    plan.grants.clear();
    plan.forgotten.clear();
  }
  PublishPlan(site->in, plan);
  if (!plan.changed && !target_changed && site->ledger_kv != nullptr) {
    RepairGrants(plan.ledger, site->in.epoch, site->in.grants, {});
    status_.ledger = std::move(plan.ledger);
    return;
  }
  if (!AdmissibleToWrite(*ledger, plan)) return;
  Write(*site, std::move(plan), now_s);
}

// Reads revisions_seen_, compacted_to_, last_compact_s_; writes them, the store's history
// (Compact) and status_.compacted_to.
void Coordinator::CompactHistory(double now_s, int64_t revision) {
  // The history older than keep_history_s goes (one compaction at most per tenth of it).
  revisions_seen_.emplace_back(now_s, revision);
  int64_t compact_to = 0;
  while (!revisions_seen_.empty() &&
         revisions_seen_.front().first <= now_s - config_.keep_history_s) {
    compact_to = revisions_seen_.front().second;
    revisions_seen_.pop_front();
  }
  if (compact_to > compacted_to_ && now_s - last_compact_s_ >= config_.keep_history_s / 10.0) {
    last_compact_s_ = now_s;
    if (auto st = store_.Compact(compact_to); st) {
      compacted_to_ = compact_to;
      status_.compacted_to = compact_to;
    } else {
      status_.last_error = st.error().message();
    }
  }
}

// Reads the target key (once per revision) and the ledger's floors; writes the ledger's
// targets and target_revision, decrease_since_s_, status_.conflict or status_.last_error.
// Whether the target's revision was new.
bool Coordinator::ApplyTarget(const LeadRead& site, double now_s, Ledger* ledger) {
  // A new target, once per revision of its key; checked again against the floors read now.
  if (!site.target || site.target_kv->mod_revision <= ledger->target_revision) return false;
  const int64_t revision = site.target_kv->mod_revision;
  ledger->target_revision = revision;
  const double w = site.target->site_budget_w, r = site.target->reserve_w;
  if (w - r < ledger->FloorsW() - 1e-6) {
    const std::string why = fmt::format(
        "target (revision {}) refused: site budget {:.1f} W - reserve {:.1f} W is below the "
        "floors of the running jobs {:.1f} W",
        revision, w, r, ledger->FloorsW());
    log_.Error(why, {{"revision", revision},
                     {"site_budget_w", w},
                     {"reserve_w", r},
                     {"floors_w", ledger->FloorsW()}});
    status_.last_error = why;
  } else {
    if (w < ledger->site_budget_w || r > ledger->reserve_w) decrease_since_s_ = now_s;
    ledger->target_site_budget_w = w;
    ledger->target_reserve_w = std::abs(r - ledger->reserve_w) > 1e-9 ? r : -1.0;
    status_.conflict.clear();
    log_.Info(fmt::format("target (revision {}): site budget {:.1f} W, reserve {:.1f} W (in "
                          "force {:.1f} W, {:.1f} W)",
                          revision, w, r, ledger->site_budget_w, ledger->reserve_w),
              {{"revision", revision}, {"site_budget_w", w}, {"reserve_w", r}});
  }
  return true;
}

// Reads the ledger's jobs and standby against the members read; writes gone_since_s_ and
// in->gone_for_s.
void Coordinator::NoteAbsences(const Ledger& ledger, double now_s, PlanInput* in) {
  // Absences, on our clock: of admitted jobs and of jobs in standby.
  const auto absent = [&](const std::string& job) {
    if (in->members.contains(job) || in->duplicates.contains(job) || in->unreadable.contains(job)) {
      gone_since_s_.erase(job);
    } else {
      auto [it, fresh] = gone_since_s_.try_emplace(job, now_s);
      in->gone_for_s[job] = now_s - it->second;
    }
  };
  for (const auto& [job, j] : ledger.jobs) absent(job);
  for (const auto& [job, s] : ledger.standby) absent(job);
}

// Reads the plan and its input; writes status_'s opportunistic pool, members, unreadable and
// refused, and logs the plan's events.
void Coordinator::PublishPlan(const PlanInput& in, const PlanOutput& plan) {
  status_.opportunistic_pool_w = plan.opportunistic_pool_w;
  for (const LogEvent& e : plan.log) log_(e);
  status_.members = in.members;
  // The budget each acts on: its acknowledgement's, for its lease (fresher than the member
  // key's, which carries it along at its next put).
  for (auto& [job, m] : status_.members) {
    const auto a = in.acks.find(job);
    if (a != in.acks.end() && a->second.lease == m.lease) m.budget_w = a->second.job_budget_w;
  }
  status_.unreadable.clear();
  for (const auto& [job, lease] : in.unreadable) status_.unreadable.push_back(job);
  status_.refused.clear();
  for (const auto& [job, m] : in.members) {
    if (plan.ledger.jobs.contains(job)) continue;
    for (const Grant& g : plan.grants) {
      if (g.job == job && !g.admitted)
        status_.refused.push_back(fmt::format("{}: {}", job, g.reason));
    }
    if (auto g = in.grants.find(job); g != in.grants.end() && !g->second.admitted) {
      status_.refused.push_back(fmt::format("{}: {}", job, g->second.reason));
    }
  }
}

// Reads the plan against the ledger planned from; writes status_.overcommitted_w (logged when
// it changes) and status_.invariant_refusals. Whether the plan may be written.
bool Coordinator::AdmissibleToWrite(const Ledger& ledger, const PlanOutput& plan) {
  // Over with a newcomer's standby (drawn without asking), a plan that raises nothing may
  // still be written: it is how the grants come down to make room.
  const double overcommitted_w = plan.ledger.OvercommittedW();
  if (std::abs(overcommitted_w - status_.overcommitted_w) > 1e-6) {
    if (overcommitted_w > 1e-6) {
      log_.Error(fmt::format("OVERCOMMITTED by {:.1f} W: the floors of the jobs admitted ({:.1f} "
                             "W) and the standby "
                             "of "
                             "those not admitted ({:.1f} W) do not fit in site budget {:.1f} W - "
                             "reserve {:.1f} W; "
                             "jobs that do not fit should not have been started",
                             overcommitted_w, plan.ledger.FloorsW(), plan.ledger.StandbyW(),
                             std::min(plan.ledger.site_budget_w, plan.ledger.target_site_budget_w),
                             std::max(plan.ledger.reserve_w, plan.ledger.TargetReserveW())),
                 {{"overcommitted_w", overcommitted_w}});
    } else if (status_.overcommitted_w > 1e-6) {
      log_("no longer overcommitted");
    }
  }
  status_.overcommitted_w = overcommitted_w;
  if (InvariantSlackW(plan.ledger) < 0.0 && RaisedW(ledger, plan) > 1e-6) {
    ++status_.invariant_refusals;
    log_.Error(
        fmt::format("BUG: a plan holding {:.3f} W > site budget {:.3f} W - reserve {:.3f} W was "
                    "not written",
                    plan.ledger.HeldW(JobClass::kGuaranteed), plan.ledger.site_budget_w,
                    plan.ledger.reserve_w));
    return false;
  }
  return true;
}

// Reads the plan and the ledger key as read; writes the ledger and the grants (one transaction
// conditioned on our term and the ledger's revision, the grants beyond its cap after it),
// repairs stale grant keys, and writes status_'s counters, latency, settle time and ledger.
void Coordinator::Write(const LeadRead& site, PlanOutput plan, double now_s) {
  plan.ledger.request_id = fmt::format("{}:{}", config_.id, ++request_counter_);
  TxnRequest txn;
  txn.compare.push_back(Compare::CreateRevision(keys_.leader(), Compare::Result::kEqual, term_));
  txn.compare.push_back(site.ledger_kv != nullptr
                            ? Compare::ModRevision(keys_.ledger(), Compare::Result::kEqual,
                                                   site.ledger_kv->mod_revision)
                            : Compare::CreateRevision(keys_.ledger(), Compare::Result::kEqual, 0));
  txn.success.push_back(Op::Put(keys_.ledger(), ToJson(plan.ledger)));
  // The grants go with the ledger in one transaction, up to etcd's cap on operations per
  // transaction; the rest follow, each conditioned on our term. A grant key only ever carries
  // what a ledger already written holds, so the invariant does not depend on when it lands.
  std::vector<Op> grant_ops;
  for (const Grant& g : plan.grants) grant_ops.push_back(Op::Put(keys_.grant(g.job), ToJson(g)));
  for (const std::string& job : plan.forgotten) grant_ops.push_back(Op::Delete(keys_.grant(job)));
  const size_t inline_ops = std::min(grant_ops.size(), kMaxTxnOps - 1);
  txn.success.insert(txn.success.end(), grant_ops.begin(),
                     grant_ops.begin() + static_cast<std::ptrdiff_t>(inline_ops));
  if (!TxnWritten(txn, plan.ledger.request_id)) return;
  ++status_.ledger_writes;
  if (site.ledger_kv == nullptr) lost_ledger_.reset();
  std::set<std::string> fresh;  // grant keys this write sets
  for (const Grant& g : plan.grants) fresh.insert(g.job);
  for (const std::string& job : plan.forgotten) fresh.insert(job);
  WriteGrantOps(std::vector<Op>(grant_ops.begin() + static_cast<std::ptrdiff_t>(inline_ops),
                                grant_ops.end()));
  if (site.ledger_kv != nullptr) RepairGrants(plan.ledger, site.in.epoch, site.in.grants, fresh);
  if (decrease_since_s_ && plan.ledger.site_budget_w <= plan.ledger.target_site_budget_w + 1e-9 &&
      plan.ledger.target_reserve_w < 0.0) {
    status_.decrease_settle_s.push_back(now_s - *decrease_since_s_);
    decrease_since_s_.reset();
  }
  status_.ledger = std::move(plan.ledger);
}

// Sends the ledger's transaction; an unknown outcome resolved by reading the ledger back for
// `request_id`. Writes status_'s conflicts, unknown outcomes, last error and latency. Whether
// the ledger was written.
bool Coordinator::TxnWritten(const TxnRequest& txn, const std::string& request_id) {
  const double sent_s = now_s_();
  auto r = store_.Txn(txn);
  bool written = false;
  if (r) {
    written = r->succeeded;
    if (written) {
      Wrote(r->revision);
    } else {
      ++status_.write_conflicts;
      list_again_ = true;  // the ledger moved under the view (or the term): read it afresh
    }
  } else if (IsOutcomeUnknown(r.error())) {
    list_again_ = true;  // a write at a revision unknown: the view cannot wait for it
    // Resolved by reading back the request id written with it.
    ++status_.unknown_outcomes;
    auto back = store_.Get(keys_.ledger());
    if (back) SeesStateLost(back->revision);  // a read like any other: it may see a loss
    if (back && !back->kvs.empty()) {
      auto l = LedgerFromJson(back->kvs[0].value, keys_.ledger());
      written = l && l->request_id == request_id;
    }
    log_.Warn(fmt::format("ledger write {} had an unknown outcome: {}", request_id,
                          written ? "applied" : "not applied"));
  } else {
    status_.last_error = r.error().message();
  }
  status_.txn_latency_s.push_back(now_s_() - sent_s);
  if (status_.txn_latency_s.size() > 1024) {
    status_.txn_latency_s.erase(status_.txn_latency_s.begin());
  }
  return written;
}

void Coordinator::WriteGrantOps(const std::vector<Op>& ops) {
  // Each part on its own (the store may send them at once): a grant key carries only what a
  // ledger already written holds, so the order in which they land does not matter.
  std::vector<TxnRequest> txns;
  for (size_t at = 0; at < ops.size(); at += kMaxTxnOps) {
    TxnRequest& txn = txns.emplace_back();
    txn.compare.push_back(Compare::CreateRevision(keys_.leader(), Compare::Result::kEqual, term_));
    const size_t end = std::min(ops.size(), at + kMaxTxnOps);
    txn.success.assign(ops.begin() + static_cast<std::ptrdiff_t>(at),
                       ops.begin() + static_cast<std::ptrdiff_t>(end));
  }
  for (auto& r : store_.TxnEach(txns)) {
    // The next period's repair writes what is missing.
    if (!r) {
      status_.last_error = r.error().message();
      list_again_ = list_again_ || IsOutcomeUnknown(r.error());
    } else if (r->succeeded) {
      Wrote(r->revision);
    }
  }
}

void Coordinator::RepairGrants(const Ledger& ledger, int64_t epoch,
                               const std::map<std::string, Grant>& stored,
                               const std::set<std::string>& fresh) {
  // A grant key behind the ledger (a write lost with a leader, or a follow-up that failed):
  // written again from the ledger, under the term of the ledger that holds it.
  std::vector<Op> ops;
  for (const auto& [job, j] : ledger.jobs) {
    if (j.lease == 0 || fresh.contains(job)) continue;
    const auto it = stored.find(job);
    if (it != stored.end() && it->second.job == job && it->second.seq == j.seq &&
        it->second.epoch == epoch && it->second.lease == j.lease && it->second.admitted &&
        std::abs(it->second.job_budget_w - j.grant_w) <= 1e-6) {
      continue;
    }
    Grant g;
    g.job = job;
    g.term = ledger.term;
    g.epoch = epoch;
    g.seq = j.seq;
    g.lease = j.lease;
    g.job_budget_w = j.grant_w;
    g.admitted = true;
    ops.push_back(Op::Put(keys_.grant(job), ToJson(g)));
    ++status_.grant_repairs;
  }
  WriteGrantOps(ops);
}

Result<TargetWritten> Coordinator::RequestTarget(std::optional<double> site_budget_w,
                                                 std::optional<double> reserve_w) {
  if (term_ == 0) return Error::Io("not the leader");
  const std::optional<Ledger>& l = status_.ledger;
  TargetWritten t;
  t.site_budget_w = site_budget_w ? *site_budget_w
                    : l           ? l->target_site_budget_w
                                  : config_.site_budget_w;
  t.reserve_w = reserve_w ? *reserve_w : l ? l->TargetReserveW() : config_.reserve_w;
  if (!(t.site_budget_w > 0.0) || !std::isfinite(t.site_budget_w)) {
    return Error::Usage(fmt::format("site_budget_w: {} W: expected > 0", t.site_budget_w));
  }
  if (!(t.reserve_w >= 0.0) || !std::isfinite(t.reserve_w)) {
    return Error::Usage(fmt::format("reserve_w: {} W: expected >= 0", t.reserve_w));
  }
  if (t.reserve_w >= t.site_budget_w) {
    return Error::Usage(fmt::format("reserve_w: {:.1f} W: expected below the site budget {:.1f} W",
                                    t.reserve_w, t.site_budget_w));
  }
  if (l && t.site_budget_w - t.reserve_w < l->FloorsW() - 1e-6) {
    return Error::Usage(fmt::format(
        "{}: {:.1f} W - reserve {:.1f} W is below the floors of the running jobs {:.1f} W",
        site_budget_w ? "site_budget_w" : "reserve_w", t.site_budget_w, t.reserve_w, l->FloorsW()));
  }
  Target value;
  value.site_budget_w = t.site_budget_w;
  value.reserve_w = t.reserve_w;
  value.request_id = fmt::format("{}:target:{}", config_.id, ++request_counter_);
  TxnRequest txn;
  txn.compare.push_back(Compare::CreateRevision(keys_.leader(), Compare::Result::kEqual, term_));
  txn.success.push_back(Op::Put(keys_.target(), ToJson(value)));
  auto r = store_.Txn(txn);
  if (!r) return Error::Io(fmt::format("the target was not written: {}", r.error().message()));
  if (!r->succeeded) return Error::Io("the target was not written: not the leader any more");
  t.revision = r->revision;
  Wrote(r->revision);
  ++status_.targets_written;
  log_.Info(
      fmt::format("target written (revision {}): site budget {:.1f} W, reserve {:.1f} W",
                  t.revision, t.site_budget_w, t.reserve_w),
      {{"revision", t.revision}, {"site_budget_w", t.site_budget_w}, {"reserve_w", t.reserve_w}});
  return t;
}

void Coordinator::Resign() {
  if (auto st = lease_.Revoke(); !st) status_.last_error = st.error().message();
  StepDown("resigned", /*lost=*/false);
}

}  // namespace headroom::coord
