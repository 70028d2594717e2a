#include "coord/member.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "common/phase.h"

namespace headroom::coord {

std::string_view StateName(Acting::State s) {
  switch (s) {
    case Acting::State::kLocal:
      return "local";
    case Acting::State::kGranted:
      return "granted";
    case Acting::State::kFenced:
      return "fenced";
    case Acting::State::kStandby:
      return "standby";
  }
  return "?";
}

SiteMember::SiteMember(Store& store, MemberConfig config, std::function<double()> monotonic_s,
                       Logger log)
    : store_(store),
      config_(std::move(config)),
      keys_(config_.site),
      now_s_(std::move(monotonic_s)),
      log_(std::move(log)),
      started_s_(now_s_()),
      own_lease_(store, config_.lease_ttl_s) {}

Acting SiteMember::CurrentLocked(double now_s) const {
  Acting a;
  if (registered_ && grant_ && grant_->admitted) {
    const double deadline_s =
        renewed_sent_s_ + static_cast<double>(lease_ttl_s_) - config_.fence_margin_s;
    if (now_s < deadline_s) {
      a.state = Acting::State::kGranted;
      a.job_budget_w = grant_->job_budget_w;
      a.term = grant_->term;
      a.seq = grant_->seq;
      a.lease = grant_->lease;
      a.valid_until_s = deadline_s;
      a.reason = fmt::format("site '{}' grant (term {}, seq {})", config_.site, a.term, a.seq);
      return a;
    }
    a.state = Acting::State::kFenced;
    a.reason =
        "fenced, held at the step boundary: lease not renewed within its TTL less the margin";
  } else if (ever_granted_) {
    a.state = Acting::State::kFenced;
    a.reason = registered_
                   ? "fenced, held at the step boundary: waiting for a grant for the new lease"
                   : "fenced, held at the step boundary: the lease is gone, registering again";
  } else {
    const std::string why = grant_ && !grant_->admitted ? grant_->reason
                            : !status_.refused.empty()  ? status_.refused
                                                        : std::string("no grant yet");
    a.valid_until_s = std::numeric_limits<double>::infinity();
    if (config_.fail_open) {
      a.state = Acting::State::kLocal;
      a.job_budget_w = config_.local_budget_w;
      a.reason = "local budget (--site-fail-open): " + why;
      return a;
    }
    a.state = Acting::State::kStandby;
    a.job_budget_w =
        config_.standby_w >= 0.0 ? std::min(config_.standby_w, config_.floor_w) : config_.floor_w;
    a.hold_until_admitted = true;
    a.reason = "standby, held until admitted: " + why;
    return a;
  }
  // Fenced: the step under way ends on the floor, and the trainer starts no other until a grant
  // for a live lease comes (a hold, as a newcomer's): the ledger may forget the floor of a job
  // whose lease is gone once that step is certain to have ended (coord/plan.h, step 1).
  a.job_budget_w = config_.floor_w;
  a.hold_until_admitted = true;
  a.valid_until_s = std::numeric_limits<double>::infinity();
  return a;
}

void SiteMember::ServeLocked(const Acting& a) {
  if (a.state == Acting::State::kGranted && a.seq > served_seq_) served_seq_ = a.seq;
  if (a.state == Acting::State::kFenced && status_.acting != Acting::State::kFenced) {
    ++status_.fences;
  }
  status_.acting = a.state;
  status_.acting_job_budget_w = a.job_budget_w;
  status_.acting_term = a.term;
  served_ = a;
}

Acting SiteMember::Current() {
  const double now_s = now_s_();
  MutexLock lock(mu_);
  Acting a = CurrentLocked(now_s);
  ServeLocked(a);
  return a;
}

Acting SiteMember::Peek() const {
  const double now_s = now_s_();
  MutexLock lock(mu_);
  return CurrentLocked(now_s);
}

std::optional<Acting> SiteMember::ServeIf(const std::function<bool(const Acting&)>& serve) {
  const double now_s = now_s_();
  MutexLock lock(mu_);
  Acting a = CurrentLocked(now_s);
  if (!serve(a)) return std::nullopt;
  ServeLocked(a);
  return a;
}

void SiteMember::Declare(const Declared& d) {
  MutexLock lock(mu_);
  declared_ = d;
}

void SiteMember::SetDemandW(double demand_w) {
  MutexLock lock(mu_);
  demand_override_w_ =
      demand_w < 0.0 ? -1.0 : std::clamp(demand_w, config_.floor_w, config_.nameplate_w);
}

void SiteMember::Observe(double t_s, double power_w, std::string_view phase, double tokens_per_s) {
  MutexLock lock(mu_);
  power_w_ = power_w;
  phase_ = std::string(phase);
  // The step timeline: rollout, the rest of the step, held; startup and stopped are none.
  const Part part = phase == PhaseName(Phase::kRollout) ? Part::kRollout
                    : phase == PhaseName(Phase::kIdle)  ? Part::kHeld
                    : phase == PhaseName(Phase::kStartup) || phase == PhaseName(Phase::kStopped)
                        ? Part::kNone
                        : Part::kRest;
  if (part != part_) {
    if (part_ != Part::kNone && part_samples_ > 0) {
      PartStats& done = part_ == Part::kRollout ? rollout_ : part_ == Part::kRest ? rest_ : held_;
      const double length_s = t_s - part_start_s_;
      const double mean_w = part_power_sum_w_ / part_samples_;
      constexpr double kNewest = 0.3;
      done.length_s = done.seen ? (1 - kNewest) * done.length_s + kNewest * length_s : length_s;
      done.power_w = done.seen ? (1 - kNewest) * done.power_w + kNewest * mean_w : mean_w;
      done.seen = true;
    }
    if (part == Part::kRollout) ++steps_seen_;
    if (part == Part::kHeld && grant_ && grant_->hold_step == steps_seen_ + 1 &&
        grant_->hold_s > 0.0) {
      held_step_ = grant_->hold_step;
      held_for_s_ = grant_->hold_s;
    }
    part_ = part;
    part_start_s_ = t_s;
    part_power_sum_w_ = 0.0;
    part_samples_ = 0;
  }
  part_power_sum_w_ += power_w;
  ++part_samples_;
  last_observed_s_ = t_s;
  observations_.push_back({t_s, power_w, tokens_per_s, phase == PhaseName(Phase::kRollout)});
  while (!observations_.empty() && observations_.front().t_s < t_s - config_.value_window_s) {
    observations_.pop_front();
  }
}

HoldRequest SiteMember::PendingHold() {
  const double now_s = now_s_();
  MutexLock lock(mu_);
  const Acting a = CurrentLocked(now_s);
  if (a.state != Acting::State::kGranted || !grant_ || !(grant_->hold_s > 0.0)) return {};
  if (grant_->hold_step != steps_seen_ + 1 || held_step_ == grant_->hold_step) return {};
  return {grant_->hold_s, grant_->hold_step};
}

Result<TxnResult> SiteMember::TakeName(double now_s, LeaseId lease, const Member& m) {
  // The name, or else a duplicate's key (counted at standby) on the same lease; the duplicate
  // names the predecessor it has seen gone here, if any (Member::replaces).
  const std::string duplicate_key = keys_.duplicate(config_.job, lease);
  Member as_duplicate = m;
  as_duplicate.replaces = gone_holder_;
  TxnRequest txn;
  txn.compare.push_back(
      Compare::CreateRevision(keys_.member(config_.job), Compare::Result::kEqual, 0));
  txn.success.push_back(Op::Put(keys_.member(config_.job), ToJson(m), lease));
  txn.success.push_back(Op::Delete(duplicate_key));
  txn.failure.push_back(Op::Get(keys_.member(config_.job)));
  txn.failure.push_back(Op::Put(duplicate_key, ToJson(as_duplicate), lease));
  auto r = store_.Txn(txn);
  // Taken on this very lease: an earlier try was applied though its answer was lost (an unknown
  // outcome). The name is ours: the member key put again and the duplicate's key just put
  // deleted, while the key is the one that try created.
  if (r && !r->succeeded && !r->responses.empty() && !r->responses[0].empty() &&
      r->responses[0][0].lease == lease) {
    TxnRequest own;
    own.compare.push_back(Compare::CreateRevision(
        keys_.member(config_.job), Compare::Result::kEqual, r->responses[0][0].create_revision));
    own.success.push_back(Op::Put(keys_.member(config_.job), ToJson(m), lease));
    own.success.push_back(Op::Delete(duplicate_key));
    return store_.Txn(own);
  }
  // Taken by this job's previous agent on this machine, and that process is gone: its lease
  // goes now (it acts on nothing), and the registration is tried once more.
  if (!r || r->succeeded || r->responses.empty() || r->responses[0].empty() ||
      !config_.holder_gone || config_.holder.empty()) {
    return r;
  }
  const KeyValue taken = r->responses[0][0];
  auto before = MemberFromJson(taken.value, taken.key);
  const bool gone = before && !before->holder.empty() && before->holder != config_.holder &&
                    taken.lease != 0 && config_.holder_gone(before->holder);
  // Newly seen gone: the duplicate key just put does not name it yet.
  const bool newly_gone = gone && gone_holder_ != before->holder;
  if (newly_gone) {
    gone_holder_ = before->holder;
    gone_seen_s_ = now_s;
    as_duplicate.replaces = gone_holder_;
    txn.failure.back() = Op::Put(duplicate_key, ToJson(as_duplicate), lease);
  }
  // Not before TTL - margin from when we first saw it gone (at our start, for a restart): it
  // died before that, so what it (and its trainer, whose actuations are valid no longer) may
  // act on ends by then. A duplicate that saw it alive waits as long from its death.
  const bool past_its_deadline = gone && now_s >= std::max(started_s_, gone_seen_s_) +
                                                      static_cast<double>(config_.lease_ttl_s) -
                                                      config_.fence_margin_s;
  if (gone && past_its_deadline) {
    if (auto revoked = store_.LeaseRevoke(taken.lease); revoked || IsLeaseGone(revoked.error())) {
      log_.Warn(fmt::format("site: job '{}': its previous agent ({}) is gone: lease {:x} revoked",
                            config_.job, before->holder, taken.lease),
                {{"site", config_.site},
                 {"job", config_.job},
                 {"lease", fmt::format("{:x}", taken.lease)}});
      return store_.Txn(txn);
    }
  }
  // Still a duplicate: it names its predecessor now, not a period later, so that the leader
  // stops counting the same job's GPUs twice at once.
  if (newly_gone) {
    if (auto put = store_.Put(duplicate_key, ToJson(as_duplicate), lease); !put) {
      MutexLock lock(mu_);
      status_.last_error = put.error().message();
    }
  }
  return r;
}

bool SiteMember::Register(double now_s) {
  // The lease kept from an earlier try, while it lives; else a new one.
  if (!own_lease_.RenewIfDue(now_s)) {
    own_lease_.Forget();  // gone (or unknown: a new one is cheap, the old one expires)
  }
  if (!own_lease_.held()) {
    if (auto lease = own_lease_.Grant(now_s); !lease) {
      MutexLock lock(mu_);
      if (status_.last_error != lease.error().message()) {
        log_.Warn(fmt::format("site: {} ({}; retrying)", lease.error().message(),
                              config_.fail_open ? "on the local budget" : "at standby, held"),
                  {{"site", config_.site}, {"job", config_.job}});
      }
      status_.last_error = lease.error().message();
      return false;
    }
  }
  const LeaseId lease = own_lease_.id();
  Member m;
  {
    MutexLock lock(mu_);
    m = DemandLocked(lease);
  }
  auto r = TakeName(now_s, lease, m);
  const std::string duplicate_key = keys_.duplicate(config_.job, lease);
  if (!r || !r->succeeded) {
    std::string why;
    bool duplicate = false;
    if (!r) {
      why = r.error().message();
      if (IsLeaseGone(r.error())) own_lease_.Forget();
    } else if (!r->responses.empty() && !r->responses[0].empty()) {
      duplicate = true;
      why = fmt::format(
          "job name '{}' is taken at site '{}' by lease {:x} (another agent, or this job's "
          "previous agent until its lease expires): counted at standby as {}",
          config_.job, config_.site, r->responses[0][0].lease,
          duplicate_key.substr(keys_.members().size()));
    } else {
      why = "registration lost a race; retrying";
    }
    MutexLock lock(mu_);
    if (status_.refused != why) {
      log_.Error(fmt::format("site: {}", why), {{"site", config_.site}, {"job", config_.job}});
    }
    status_.refused = why;
    status_.duplicate = duplicate;
    return false;
  }
  MutexLock lock(mu_);
  lease_ = lease;
  lease_ttl_s_ = config_.lease_ttl_s;
  renewed_sent_s_ = own_lease_.renewed_s();
  registered_ = true;
  grant_.reset();
  // The registration put the member key: the next put is on change, or refresh_s from now.
  checked_s_ = now_s;
  checked_phase_ = phase_;
  put_ = std::move(m);
  put_s_ = now_s;
  ++status_.puts;
  status_.refused.clear();
  status_.duplicate = false;
  status_.last_error.clear();
  status_.registered = true;
  status_.lease = lease_;
  log_.Info(fmt::format("site: job '{}' registered at site '{}' (lease {:x})", config_.job,
                        config_.site, lease_),
            {{"site", config_.site}, {"job", config_.job}, {"lease", fmt::format("{:x}", lease_)}});
  return true;
}

// The lease, three times per TTL (coord::Lease). False when the step ends here (the lease
// gone: fenced, to register again; or the store's error noted).
bool SiteMember::KeepLease(double now_s) {
  if (!own_lease_.Due(now_s)) return true;
  const LeaseId lease = own_lease_.id();
  auto kept = own_lease_.Renew(now_s_());
  MutexLock lock(mu_);
  if (kept) {
    renewed_sent_s_ = own_lease_.renewed_s();
    lease_ttl_s_ = own_lease_.ttl_s();
    return true;
  }
  if (IsLeaseGone(kept.error())) {
    log_.Warn(
        fmt::format("site: lease {:x} gone: fenced at the floor, registering again", lease),
        {{"site", config_.site}, {"job", config_.job}, {"lease", fmt::format("{:x}", lease)}});
    ++status_.leases_lost;
    registered_ = false;
    status_.registered = false;
    lease_ = 0;
    grant_.reset();
  } else {
    status_.last_error = kept.error().message();
  }
  return false;
}

// The member key: checked every update_s, or at once at a change of phase where those are
// published; put when what the coordinator plans on changed since the last put, or refresh_s
// after it (docs/SITE.md, "Members write on change"). A put that fails is tried again at the
// next check.
void SiteMember::PublishDemand(double now_s, LeaseId lease) {
  Member m;
  {
    MutexLock lock(mu_);
    const bool phase_changed = PublishesPhase() && phase_ != checked_phase_;
    if (now_s - checked_s_ < config_.update_s && !phase_changed) return;
    checked_s_ = now_s;
    checked_phase_ = phase_;
    m = DemandLocked(lease);
    if (put_ && now_s - put_s_ < config_.refresh_s && !PlanInputsChanged(*put_, m, config_)) {
      return;
    }
  }
  auto r = store_.Put(keys_.member(config_.job), ToJson(m), lease);
  MutexLock lock(mu_);
  if (!r) {
    status_.last_error = r.error().message();
    return;
  }
  put_ = std::move(m);
  put_s_ = now_s;
  ++status_.puts;
}

// The grant: every Step, or with a watch every grant_read_s (a stream gone quiet). False when
// the read failed (the step ends here).
bool SiteMember::ReadGrant(double now_s) {
  int64_t before = 0;
  {
    MutexLock lock(mu_);
    const bool read = config_.grant_read_s <= 0.0 || grant_revision_ == 0 ||
                      now_s - grant_read_s_ >= config_.grant_read_s;
    if (!read) return true;
    grant_read_s_ = now_s;
    before = max_revision_;
  }
  auto got = store_.Get(keys_.grant(config_.job));
  MutexLock lock(mu_);
  if (!got) {
    status_.last_error = got.error().message();
    return false;
  }
  // The store's revision never goes back in one history (`before` was seen before asking).
  SeenRevisionLocked(got->revision, before);
  if (!got->kvs.empty()) TakeGrantLocked(got->kvs[0]);
  grant_revision_ = std::max(grant_revision_, got->revision);
  return true;
}

// The acknowledgement of what the controller acts on.
void SiteMember::Acknowledge(LeaseId lease) {
  Ack ack;
  {
    MutexLock lock(mu_);
    if (!(served_seq_ > acked_seq_ && served_.state == Acting::State::kGranted &&
          served_.lease == lease_)) {
      return;
    }
    ack = {config_.job, served_.term, served_.seq, served_.lease, served_.job_budget_w};
  }
  if (auto r = store_.Put(keys_.ack(config_.job), ToJson(ack), lease); r) {
    MutexLock lock(mu_);
    acked_seq_ = std::max(acked_seq_, ack.seq);
    ++status_.acks;
  } else {
    MutexLock lock(mu_);
    status_.last_error = r.error().message();
  }
}

void SiteMember::Step() {
  const double now_s = now_s_();
  bool registered = false;
  {
    MutexLock lock(mu_);
    registered = registered_;
  }
  if (!registered && !Register(now_s)) return;
  const LeaseId lease = own_lease_.id();
  if (!KeepLease(now_s)) return;
  PublishDemand(now_s, lease);
  if (!ReadGrant(now_s)) return;
  Acknowledge(lease);
}

void SiteMember::SeenRevisionLocked(int64_t revision, int64_t before) {
  // When the store's revision goes back, its state was lost (a new cluster, a restore). Terms
  // and epochs start again there: forget the ones seen, or the new leader's grants would be
  // ignored for good.
  if (revision < before) {
    log_.Warn(
        fmt::format("site: the store's revision went back from {} to {}: its state was lost; "
                    "following its new leader",
                    before, revision));
    max_term_ = 0;
    status_.max_term = 0;
    grant_.reset();
    served_seq_ = 0;  // the new store's sequences start again: acknowledge them
    acked_seq_ = 0;
    grant_revision_ = 0;  // the watch starts again from a read
    max_revision_ = 0;
    ++status_.store_resets;
  }
  max_revision_ = std::max(max_revision_, revision);
}

bool SiteMember::TakeGrantLocked(const KeyValue& kv) {
  auto g = GrantFromJson(kv.value, kv.key);
  if (!g) {
    if (status_.last_error != g.error().message())
      log_.Warn(fmt::format("site: ignored: {}", g.error().message()));
    status_.last_error = g.error().message();
    return false;
  }
  if (g->lease != lease_ || g->job != config_.job) return false;
  if (g->term < max_term_) {
    ++status_.stale_grants_ignored;
    return false;
  }
  if (grant_ && g->epoch < grant_->epoch) return false;
  if (grant_ && g->epoch == grant_->epoch && g->seq <= grant_->seq) return false;
  // Newer: a later epoch (a ledger rebuilt), or a later grant of the same one. A new epoch's
  // sequence may start lower: what was served and acknowledged starts again.
  if (grant_ && g->epoch > grant_->epoch) {
    served_seq_ = 0;
    acked_seq_ = 0;
  }
  max_term_ = std::max(max_term_, g->term);
  status_.max_term = max_term_;
  if (!g->admitted && (!grant_ || grant_->admitted)) {
    log_.Warn(fmt::format("site: {}", g->reason), {{"site", config_.site}, {"job", config_.job}});
  }
  if (g->admitted) ever_granted_ = true;
  grant_ = std::move(*g);
  return true;
}

Status SiteMember::WatchGrant(double quiet_s, const std::function<void()>& on_grant) {
  int64_t from = 0;
  {
    MutexLock lock(mu_);
    from = grant_revision_;
  }
  if (from == 0) return Error::Io("site: the grant has not been read yet");
  {
    MutexLock lock(mu_);
    ++status_.watches;
  }
  bool first = true;
  bool compacted = false;
  bool reset = false;
  auto followed =
      store_.Follow(keys_.grant(config_.job), false, from, quiet_s, [&](const WatchResult& w) {
        bool newer = false;
        {
          MutexLock lock(mu_);
          if (w.compacted) {
            compacted = true;
            return false;
          }
          if (first) {
            first = false;
            // Created behind what was read: the store's state lost.
            SeenRevisionLocked(w.revision, from);
            if (grant_revision_ == 0) {
              reset = true;
              return false;
            }
          }
          for (const WatchEvent& e : w.events) {
            if (e.type == WatchEvent::Type::kPut) newer = TakeGrantLocked(e.kv) || newer;
          }
          if (newer) ++status_.grants_watched;
          max_revision_ = std::max(max_revision_, w.revision);
          grant_revision_ = std::max(grant_revision_, w.revision);
        }
        if (newer && on_grant) on_grant();
        return true;
      });
  MutexLock lock(mu_);
  if (compacted) grant_revision_ = 0;  // read afresh by the next Step
  if (!followed) {
    status_.last_error = followed.error().message();
    return std::move(followed).error();
  }
  // Nothing more for the key up to there: the next watch resumes from it.
  if (!compacted && !reset) grant_revision_ = std::max(grant_revision_, *followed);
  return OkStatus();
}

void SiteMember::StopWatching() { store_.CancelFollows(); }

void SiteMember::Leave() {
  {
    MutexLock lock(mu_);
    lease_ = 0;
    registered_ = false;
    grant_.reset();
  }
  (void)own_lease_.Revoke();  // the registered lease, or a spare one
}

MemberStatus SiteMember::status() const {
  MutexLock lock(mu_);
  return status_;
}

}  // namespace headroom::coord
