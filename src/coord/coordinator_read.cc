// The leader's read of its site each period (coordinator.h): its view brought up to date (from
// the feed, or listed again) and parsed into the plan's input. Coordinator's, in a file of
// their own.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "coord/coordinator.h"

namespace headroom::coord {

namespace {

std::string_view JobOf(const std::string& key, const std::string& prefix) {
  return std::string_view(key).substr(prefix.size());
}

}  // namespace

// Reads view_, viewed_term_, list_again_ and written_revision_ and the feed; writes view_,
// viewed_term_, list_again_ and status_'s lists, updates, view revision and last error.
bool Coordinator::ReadView() {
  if (view_.listed() && viewed_term_ == term_ && !list_again_) {
    auto changes = feed_->Changes(view_.revision(), written_revision_, config_.period_s);
    if (!changes) status_.last_error = changes.error().message();
    for (const WatchResult& batch : changes ? *changes : std::vector<WatchResult>{}) {
      if (!view_.Apply(batch)) break;  // compacted, or gone back: list again
    }
    // A feed that failed may have missed changes: the view is behind, so it is listed again.
    if (changes && view_.listed() && view_.revision() >= written_revision_) {
      ++status_.view_updates;
      status_.view_revision = view_.revision();
      return true;
    }
  }
  auto list = store_.Get(keys_.root, /*prefix=*/true);
  if (!list) {
    status_.last_error = list.error().message();
    return false;
  }
  ++status_.site_lists;
  view_.Reset(*list);
  // A list after a store's state was lost may reuse revisions: nothing parsed is kept.
  members_parsed_.Clear();
  acks_parsed_.Clear();
  grants_parsed_.Clear();
  viewed_term_ = term_;
  list_again_ = false;
  status_.view_revision = view_.revision();
  // The feed follows from here at once (what it has is for the next period).
  if (auto started = feed_->Changes(view_.revision(), 0, 0.0); started) {
    for (const WatchResult& batch : *started) {
      if (!view_.Apply(batch)) break;
    }
  }
  return view_.listed();
}

// Reads malformed_seen_; writes it and status_.malformed_values: counted and logged once per
// value (key and revision), not at every period that reads it again.
void Coordinator::NoteMalformed(const KeyValue& kv, const Error& e) {
  auto& seen = malformed_seen_[kv.key];
  if (seen != kv.mod_revision) {
    seen = kv.mod_revision;
    ++status_.malformed_values;
    log_.Warn(fmt::format("ignored: {}", e.message()));
  }
}

// Reads the snapshot; writes the plan's input (members, duplicates, acks, grants, target) and
// the pointers to the ledger and target keys; steps down, and returns nothing, when the leader
// key is no longer ours.
std::optional<Coordinator::LeadRead> Coordinator::ReadSite(
    const std::map<std::string, KeyValue>& kvs, double now_s) {
  const KeyValue* leader = nullptr;
  LeadRead site;
  PlanInput& in = site.in;
  in.forget_after_s = config_.forget_after_s;
  in.allocation = config_.allocation;
  in.fairness = config_.fairness;
  in.loan_lead_s = config_.loan_lead_s;
  in.loan_margin = config_.loan_margin;
  in.loan_cover = config_.loan_cover;
  for (const auto& [key, kv] : kvs) {
    if (kv.key == keys_.leader()) {
      leader = &kv;
    } else if (kv.key == keys_.ledger()) {
      site.ledger_kv = &kv;
    } else if (kv.key == keys_.target()) {
      site.target_kv = &kv;
    } else if (kv.key.starts_with(keys_.members())) {
      ReadMember(kv, now_s, &in);
    } else if (kv.key.starts_with(keys_.acks())) {
      const Result<Ack>& a = acks_parsed_.Get(kv, AckFromJson);
      if (!a) {
        NoteMalformed(kv, a.error());
        continue;
      }
      in.acks[a->job] = *a;
    } else if (kv.key.starts_with(keys_.grants())) {
      const Result<Grant>& g = grants_parsed_.Get(kv, GrantFromJson);
      if (!g) {
        NoteMalformed(kv, g.error());
        continue;
      }
      in.grants[g->job] = *g;
    }
  }
  // Keys gone are forgotten.
  std::erase_if(member_seen_, [&](const auto& e) { return !kvs.contains(e.first); });
  members_parsed_.Sweep();
  acks_parsed_.Sweep();
  grants_parsed_.Sweep();
  if (leader == nullptr || leader->lease != lease_.id() || leader->create_revision != term_) {
    StepDown("the leader key is no longer ours");
    return std::nullopt;
  }
  // The operator's target (its own key, written by POST /v1/site-budget): one that cannot be
  // read is ignored and logged, as every value.
  if (site.target_kv != nullptr) {
    auto t = TargetFromJson(site.target_kv->value, site.target_kv->key);
    if (t) {
      site.target = std::move(*t);
    } else {
      NoteMalformed(*site.target_kv, t.error());
    }
  }
  return site;
}

// Reads one member key and member_seen_; writes member_seen_, in's members and registered_at,
// duplicates, or unreadable.
void Coordinator::ReadMember(const KeyValue& kv, double now_s, PlanInput* in) {
  // Unknown is not gone (docs/SITE.md): a key alive on its lease whose value cannot be
  // read keeps the watts its job holds.
  const std::string job(JobOf(kv.key, keys_.members()));
  Result<Member> m = members_parsed_.Get(kv, MemberFromJson);
  if (job.find('@') != std::string::npos) {
    // A second agent under a taken name: counted at standby, never admitted.
    if (m && kv.key == keys_.duplicate(m->job, kv.lease) && m->lease == kv.lease) {
      in->duplicates[job] = std::move(*m);
    } else {
      NoteMalformed(kv,
                    m ? Error::Input(fmt::format("{}: job or lease differs from the key's", kv.key))
                      : m.error());
      in->unreadable[job] = kv.lease;
    }
    return;
  }
  if (!m) {
    NoteMalformed(kv, m.error());
    in->unreadable[job] = kv.lease;
    return;
  }
  if (m->job != job || m->lease != kv.lease) {
    NoteMalformed(kv, Error::Input(fmt::format("{}: job or lease differs from the key's", kv.key)));
    in->unreadable[job] = kv.lease;
    return;
  }
  auto& [revision, seen_s] = member_seen_[kv.key];
  if (revision != kv.mod_revision) {
    revision = kv.mod_revision;
    seen_s = now_s;
  }
  if (m->has_timeline && now_s > seen_s) {
    m->timeline.phase_elapsed_s += now_s - seen_s;
    m->timeline.held_left_s = std::max(0.0, m->timeline.held_left_s - (now_s - seen_s));
  }
  in->registered_at[m->job] = kv.create_revision;
  in->members[m->job] = std::move(*m);
}

}  // namespace headroom::coord
