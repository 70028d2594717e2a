// `headroom coordinator`'s core: one replica of the site's coordinator. Every period it keeps
// its lease, campaigns for the leader key while no one leads, and, leading, brings its view of
// the site's keys up to date (site_view.h: listed once per term, then the changes a watch of
// the prefix brings, site_feed.h), plans on it (plan.h) and writes the ledger and the grants in
// one transaction conditioned on its term and on the ledger's revision as the view has it. No
// threads, no clock of its own (the caller's `now_s`), no I/O but the Store and the feed.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/log.h"
#include "coord/layout.h"
#include "coord/lease.h"
#include "coord/plan.h"
#include "coord/site_feed.h"
#include "coord/site_view.h"
#include "coord/store.h"

namespace headroom::coord {

struct CoordinatorConfig {
  std::string site;
  double site_budget_w = 0.0;  // used when the site has no ledger yet
  double reserve_w = 0.0;
  double period_s = 1.0;
  int64_t lease_ttl_s = 3;
  double forget_after_s = 60.0;
  Allocation allocation = Allocation::kProportional;  // --allocation
  Fairness fairness = Fairness::kNone;                // --fairness (with allocation by value)
  // Staggering (coord/stagger.h): holds of up to max_hold_s before a job's next step (0: none),
  // planned each period over the next stagger_horizon_s; passes 1: greedy, more: descent.
  double max_hold_s = 0.0;
  double stagger_horizon_s = 600.0;
  int stagger_passes = 1;
  // Reservations before the update (coord/reservation.h): each job's update reserved before it
  // starts, or the job held (up to max_hold_s) until one fits; replaces staggering's holds.
  bool reserve_updates = false;
  double reservation_lead_s = 0.0;  // 0: three periods
  // Loans to opportunistic jobs (coord/plan.h, PlanInput): 0 s: none.
  double loan_lead_s = 0.0;
  double loan_margin = 0.05;
  double loan_cover = 0.5;
  // The leader compacts the store's history older than this (etcd keeps every revision until
  // compacted, and refuses writes past its quota: ~2 GiB by default).
  double keep_history_s = 300.0;
  // A domain's parent site (--parent-site; "": a site): its budget is its grant from there, so
  // POST /v1/site-budget is refused.
  std::string parent_site;
  std::string id;      // unique per replica (host, pid, a random part)
  std::string listen;  // where its API is, written with the leader key
};

// A domain's place under its parent site (coord/domain.h), as /v1/status shows it.
struct ParentStatus {
  std::string etcd;  // the parent's etcd endpoints
  std::string site;  // the parent site
  // granted (its grant from the parent is its budget), fenced (its parent lease not renewed:
  // its budget goes to its floor), standby (not granted yet by this replica), follower (this
  // replica does not lead: the leader is the member).
  std::string state = "follower";
  double job_budget_w = 0.0;  // the grant from the parent it acts on (0: none)
  double pending_w = 0.0;     // a lower grant not acknowledged yet (its jobs still above; 0: none)
  int64_t term = 0, seq = 0;  // of that grant
  LeaseId lease = 0;          // its parent lease
  double floor_w = 0.0, demand_w = 0.0;  // as declared to the parent
  uint64_t acks = 0, fences = 0, puts = 0;
  std::string reason;  // why the state, in words
};

struct CoordinatorStatus {
  std::string role = "candidate";  // candidate, follower, leader
  int64_t term = 0;                // ours when leading
  std::string leader;              // the leader's id, when known
  std::optional<Ledger> ledger;    // the last read or written
  std::map<std::string, Member> members;
  std::vector<std::string> refused;  // jobs not admitted, with reasons
  std::string conflict;              // the ledger's budget or reserve differs from our flags
  std::string last_error;
  uint64_t ledger_writes = 0;
  uint64_t targets_written = 0;  // operator requests written to the target key
  uint64_t write_conflicts = 0;  // transactions that lost a race
  uint64_t unknown_outcomes = 0;
  uint64_t invariant_refusals = 0;        // plans refused for breaking the invariant (a bug if > 0)
  uint64_t elections_won = 0;             // times this replica began leading
  uint64_t leadership_lost = 0;           // times it stopped leading other than by resigning
  std::vector<double> txn_latency_s;      // the last 1024
  std::vector<double> decrease_settle_s;  // per site budget decrease, from request to in force
  // The last staggering plan's prediction (with --max-hold-s).
  double stagger_tokens_saved = 0.0;
  double stagger_peak_before_w = 0.0, stagger_peak_after_w = 0.0;
  // The last reservation plan (with reserve_updates): jobs whose update is reserved now, and
  // updates within the horizon no hold could fit (they run unreserved).
  int reserved_jobs = 0;
  int unreserved_updates = 0;
  uint64_t malformed_values = 0;  // values ignored, once each (key and revision)
  // Member keys alive whose values cannot be read: their jobs keep what they hold.
  std::vector<std::string> unreadable;
  // The last plan's watts for opportunistic jobs: what the guaranteed targets leave, or the
  // loans when more (coord/plan.h).
  double opportunistic_pool_w = 0.0;
  // What cannot fit even with every admitted job at its floor (Ledger::OvercommittedW), as the
  // last plan found it: > 0, jobs were started that the site cannot hold.
  double overcommitted_w = 0.0;
  // The most a job drew on arrival, before admission and without asking (PlanOutput::
  // arrivals_w: its standby, or its floor mid-step), over the arrivals this replica planned
  // while leading; 0: none yet. Only the reserve covers it (docs/SITE.md, "Every job at the
  // site"); ReserveShortW says by how much it does not.
  double largest_arrival_standby_w = 0.0;
  uint64_t store_resets = 0;   // times the store's revision went back (its state lost)
  uint64_t grant_repairs = 0;  // grant keys written again from the ledger
  int64_t compacted_to = 0;    // the store's history is compacted up to this revision
  // The leader's view (site_view.h): whole-prefix reads (once per term, and again when the feed
  // fails, falls behind this replica's own writes or a write finds the view stale), periods
  // planned on the feed's changes instead, and the revision the view is at.
  uint64_t site_lists = 0;
  uint64_t view_updates = 0;
  int64_t view_revision = 0;
  // A domain's (set by its daemon, coord/domain.h); absent at a site.
  std::optional<ParentStatus> parent;
};

// What the reserve in force lacks to cover the largest arrival's standby:
// max(0, largest_arrival_standby_w - reserve_w); 0 without a ledger.
double ReserveShortW(const CoordinatorStatus& s);

// A target written: the store's revision, and the target.
struct TargetWritten {
  int64_t revision = 0;
  double site_budget_w = 0.0;
  double reserve_w = 0.0;
};

// Operations per transaction: etcd's default cap (--max-txn-ops) is 128.
inline constexpr size_t kMaxTxnOps = 100;

// Values parsed once per revision of their key: the leader's view keeps most keys as they were
// from one period to the next, so a period parses only those that changed (at 2,000 agents,
// 6,000 JSON values: 40 ms of a core each period, docs/PERFORMANCE.md). Keys not asked for
// since the last Sweep are forgotten there.
template <class T>
class ParsedValues {
 public:
  using Parser = Result<T> (*)(std::string_view text, std::string_view where);
  const Result<T>& Get(const KeyValue& kv, Parser parse) {
    Entry& e = entries_[kv.key];
    if (!e.value || e.mod_revision != kv.mod_revision) {
      e.mod_revision = kv.mod_revision;
      e.value.emplace(parse(kv.value, kv.key));
    }
    e.sweep = sweep_;
    return *e.value;
  }
  void Sweep() {
    std::erase_if(entries_, [&](const auto& e) { return e.second.sweep != sweep_; });
    ++sweep_;
  }
  void Clear() { entries_.clear(); }

 private:
  struct Entry {
    int64_t mod_revision = 0;
    std::optional<Result<T>> value;
    uint64_t sweep = 0;
  };
  std::map<std::string, Entry> entries_;
  uint64_t sweep_ = 0;
};

class Coordinator {
 public:
  // `feed`: where the view's changes come from (outlives the coordinator); null: a PolledFeed
  // of the store's own (for a store whose Watch answers at once: MemoryStore).
  Coordinator(Store& store, CoordinatorConfig config, std::function<double()> now_s, Logger log,
              SiteFeed* feed = nullptr);

  // One period. Never throws; store failures are logged and retried next period.
  void Step();
  // An operator's (or demand response's) new site budget and/or reserve (nullopt: unchanged),
  // leader only: written to the target key (conditioned on our term) before this returns, so
  // that it survives a change of leader; applied from the next period, down first. Refused
  // (Error::Usage, with the numbers) when the budget less the reserve is below the floors of
  // the running jobs; Error::Io when the store did not take it (not leading any more, or
  // unreachable).
  Result<TargetWritten> RequestTarget(std::optional<double> site_budget_w,
                                      std::optional<double> reserve_w);
  Status RequestSiteBudget(double site_budget_w) {
    auto r = RequestTarget(site_budget_w, std::nullopt);
    if (!r) return std::move(r).error();
    return OkStatus();
  }
  // Gives up the lease (a clean stop: another replica leads at once).
  void Resign();

  const CoordinatorStatus& status() const { return status_; }
  bool leading() const { return term_ != 0; }

 private:
  // `lost`: leadership lost (counted), not given up by Resign.
  void StepDown(const std::string& why, bool lost = true);
  void PlanStagger(const Ledger& ledger, PlanInput* in);
  void PlanUpdateReservations(const Ledger& ledger, PlanInput* in);
  // The plan's arrivals against the reserve in force: the largest kept, and a warning once per
  // arrival (job and lease) whose standby the reserve does not cover.
  void NoteArrivals(const PlanOutput& plan);
  // A leader's period, as named steps (coordinator.cc): ReadView -> ReadSite ->
  // LedgerToPlanFrom -> ApplyTarget -> NoteAbsences -> (holds) -> Plan -> AdmissibleToWrite ->
  // Write.
  void Lead(double now_s);
  // The view brought up to date: the feed's changes, waiting up to a period for this
  // replica's own last write; listed again when it is new this term, the feed failed or fell
  // behind, or the last write found it stale. False when the store could not be read.
  bool ReadView();
  // The site as the view has it, parsed; the pointers are into the view, which stays as it is
  // for the period.
  struct LeadRead {
    const KeyValue* ledger_kv = nullptr;  // none: a new ledger
    const KeyValue* target_kv = nullptr;
    std::optional<Target> target;  // the target key's value, when it can be read
    PlanInput in;                  // members, duplicates, unreadable, acks, grants; config
  };
  void CompactHistory(double now_s, int64_t revision);
  // Counted, and logged once per revision of the key.
  void NoteMalformed(const KeyValue& kv, const Error& e);
  // Nothing when the leader key is no longer ours (stepped down).
  std::optional<LeadRead> ReadSite(const std::map<std::string, KeyValue>& kvs, double now_s);
  // A member key parsed; its step timeline aged by the time since this replica first saw that
  // revision of the key (a member puts its timeline at its events only: "Members write on
  // change").
  void ReadMember(const KeyValue& kv, double now_s, PlanInput* in);
  // The ledger key's, else the one held before the store's state was lost, else from the
  // operator's target, else from the flags. Nothing when the ledger key cannot be read.
  std::optional<Ledger> LedgerToPlanFrom(const LeadRead& site, double now_s);
  std::optional<Ledger> ReadLedger(const KeyValue& kv);
  // REQUIRES: lost_ledger_.
  Ledger LedgerFromLost();
  // A rebuilt ledger's budget in force starts at the grants agents may still act on.
  void StartAtStoredGrants(const PlanInput& in, double now_s, Ledger* ledger);
  // Whether a new revision of the target key was seen (applied or refused).
  bool ApplyTarget(const LeadRead& site, double now_s, Ledger* ledger);
  void NoteAbsences(const Ledger& ledger, double now_s, PlanInput* in);
  void PublishPlan(const PlanInput& in, const PlanOutput& plan);
  // The invariant gate (plan.h): false, counted and logged as a BUG, for a plan that raises
  // while over the budget.
  bool AdmissibleToWrite(const Ledger& ledger, const PlanOutput& plan);
  void Write(const LeadRead& site, PlanOutput plan, double now_s);
  bool TxnWritten(const TxnRequest& txn, const std::string& request_id);
  // A follower's period: reads the ledger, so that whichever replica leads after the store's
  // state is lost starts from the site's last ledger (docs/SITE.md, "State loss").
  void Follow();
  // Whether `revision`, read from the store, is behind one read before: the store's state was
  // lost. If so, forgets what the old history taught and keeps the last ledger seen.
  bool SeesStateLost(int64_t revision);
  bool KeepLease(double now_s);
  void WriteGrantOps(const std::vector<Op>& ops);
  void RepairGrants(const Ledger& ledger, int64_t epoch, const std::map<std::string, Grant>& stored,
                    const std::set<std::string>& fresh);

  // Notes a revision this replica wrote under the site's prefix (the view waits for it).
  void Wrote(int64_t revision) { written_revision_ = std::max(written_revision_, revision); }

  Store& store_;
  CoordinatorConfig config_;
  Keys keys_;
  std::function<double()> now_s_;
  Logger log_;
  Lease lease_;                         // renewed each Step when due (a third of the TTL)
  std::unique_ptr<SiteFeed> own_feed_;  // without one given
  SiteFeed* feed_;
  SiteView view_;
  int64_t viewed_term_ = 0;       // the term the view was listed in
  bool list_again_ = false;       // a write found the view stale
  int64_t written_revision_ = 0;  // the last revision this replica wrote under the prefix
  int64_t term_ = 0;
  uint64_t request_counter_ = 0;
  std::optional<double> decrease_since_s_;
  std::map<std::string, double> gone_since_s_;
  // Arrivals warned of (NoteArrivals), job -> lease, while the job stays in the ledger's standby.
  std::map<std::string, LeaseId> arrivals_warned_;
  std::map<std::string, int64_t> malformed_seen_;  // key -> mod_revision logged
  // Member key -> its revision and when this replica first saw it (ReadMember's ageing).
  std::map<std::string, std::pair<int64_t, double>> member_seen_;
  // The view's values, parsed once per revision (cleared with the view listed again).
  ParsedValues<Member> members_parsed_;
  ParsedValues<Ack> acks_parsed_;
  ParsedValues<Grant> grants_parsed_;
  std::deque<std::pair<double, int64_t>> revisions_seen_;  // (when, store revision) read
  int64_t compacted_to_ = 0;
  double created_ledger_s_ = -1e300;  // when this replica last created the ledger
  // The last ledger this replica held or, following, read (status_.ledger) when it saw the
  // store's state lost, until a new one is written or read.
  std::optional<Ledger> lost_ledger_;
  int64_t max_revision_seen_ = 0;  // of every read, leading or following
  double last_compact_s_ = -1e300;
  CoordinatorStatus status_;
};

}  // namespace headroom::coord
