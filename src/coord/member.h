// An agent's membership of a site (docs/SITE.md): it registers the job under its own lease,
// keeps the lease alive, publishes its demand, reads its grant and acknowledges the grant its
// controller acts on. Current() says what to act on, and never waits on the store:
//   - granted: the newest grant for this lease (by the ledger's epoch, then sequence; grants of
//     an older term than one already seen are ignored -- until the store's revision goes back,
//     its state lost, when terms and epochs seen are forgotten);
//   - fenced: the lease has not been renewed for lease TTL - margin by our own monotonic clock
//     (measured from when the last successful renewal was sent, so before the store's lease can
//     expire): the floor for the step under way and a hold at the step boundary (the trainer
//     starts no other step), until a new lease is granted something -- fenced means held;
//   - standby: never granted (the store unreachable, not yet admitted, refused, or the job's
//     name taken by another agent): the job's standby draw, and a hold until it is admitted --
//     its trainer runs no step (docs/SITE.md, "Every job at the site");
//   - local: the same, with MemberConfig::fail_open: the local budget and no hold (unsafe: the
//     behaviour before standby).
// The member key is written on change (docs/SITE.md, "Members write on change"): checked every
// update_s, and put only at (re)registration, when what the coordinator plans on changed since
// the last put (PlanInputsChanged in member.cc: floor, demand, class, standby, update watts,
// nameplate, GPUs, Slurm job, holder, whether the job holds, its phase where
// phase_demand or publish_phase_changes asks for it, the step timeline's events -- a step, an
// update or a hold begun -- and a value curve first built), or refresh_s after the last put;
// what only describes the job (power, value, tokens/s, the time into the step's current part,
// the grant acted on: its acknowledgement, acks/<job>, is what the coordinator reads) rides
// along. Kubernetes does the same for a node: its lease every 10 s, its status on change.
// Step() does the store's work; one thread calls it (the agent's site thread, or fleet-sim's
// loop), while the runner calls Current() and Observe(). Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>

#include "common/log.h"
#include "common/thread_annotations.h"
#include "coord/layout.h"
#include "coord/lease.h"
#include "coord/store.h"

namespace headroom::coord {

struct MemberConfig {
  std::string site;
  std::string job;
  int gpus = 1;
  double nameplate_w = 0.0;     // the job's GPUs' nameplate + node overhead
  double floor_w = 0.0;         // the job's power at its lowest actuation + node overhead
  double local_budget_w = 0.0;  // job budget with no grant, with fail_open
  // The job's GPUs idle plus the node overhead: what it acts on, held, until admitted; below 0:
  // none known (the floor is published and acted on instead).
  double standby_w = -1.0;
  // What the job's update draws unconstrained + node overhead, published for reservations before
  // the update (coord/reservation.h); 0: unknown (the coordinator takes its timeline's rest_w).
  double update_w = 0.0;
  // Never granted: the local budget and no hold instead of standby (--site-fail-open).
  bool fail_open = false;
  double node_overhead_w = 0.0;  // inside nameplate_w and floor_w: the node's other power
  int64_t lease_ttl_s = 3;
  double fence_margin_s = 1.0;  // fences at TTL - margin after the last renewal was sent
  double update_s = 1.0;        // how often what the member key says is checked for a change
  // The longest between two puts of the member key while nothing the coordinator plans on
  // changes: what only describes the job (power, value, tokens/s) is at most this old there.
  double refresh_s = 60.0;
  double value_window_s = 120.0;  // the marginal value's estimation window
  // This agent process (common/process_identity.h), published in the member key; and the test
  // of whether the holder of a taken registration is a process known to be gone (same machine,
  // not running). With both, a restarted agent revokes its dead predecessor's lease and takes
  // the job's place at once instead of waiting out the lease; without, it waits.
  std::string holder;
  std::function<bool(std::string_view holder)> holder_gone;
  // Allocation by value (docs/SITE.md): the curve published, tokens/s against job budget in
  // rollout -- from the twin for a known scenario; empty: from the member's own history
  // (HistoryCurve), once it has one.
  std::vector<ValuePoint> value_curve;
  // Demand by phase: the nameplate while the job is in rollout (the phase its budget steers),
  // its floor otherwise (no budget lowers or raises those phases), published at each change.
  // Off: the nameplate always (the first version).
  bool phase_demand = false;
  // Publish at each change of phase too (not only every update_s): a site that lends to
  // opportunistic jobs (coord/plan.h, loans) sees a job's power rise within a period.
  bool publish_phase_changes = false;
  // With a watch on the grant (WatchGrant on a thread of its own): how often Step reads the
  // grant too, for a stream gone quiet without failing. 0: every Step (no watch: fleet-sim).
  double grant_read_s = 0.0;
  // Opportunistic (docs/SITE.md, "Job classes"): granted only what the guaranteed jobs leave;
  // floor_w and local_budget_w must be 0 (it pauses without a grant).
  JobClass job_class = JobClass::kGuaranteed;
  // The Slurm job this member runs in ("": none), published for a coordinator with --slurm.
  std::string slurm_job;
  // A domain coordinator registered under its parent site (Member::domain; coord/domain.h):
  // what it declares moves with its jobs (SiteMember::Declare).
  bool domain = false;
};

// What a member declares that may move while it is registered (a domain's: its jobs' sums).
struct Declared {
  int gpus = 0;
  double nameplate_w = 0.0;
  double floor_w = 0.0;
  double standby_w = 0.0;
  double demand_w = 0.0;
  std::vector<ValuePoint> value_curve;  // empty: the member's own (configured, or its history)
};

struct HoldRequest {
  double hold_s = 0.0;
  int64_t step = 0;
};

struct Acting {
  enum class State { kLocal, kGranted, kFenced, kStandby };
  State state = State::kLocal;
  // Standby: the trainer must not start a step until this is false (a hold until admitted).
  bool hold_until_admitted = false;
  double job_budget_w = 0.0;
  int64_t term = 0;  // of the grant (0: none)
  int64_t seq = 0;
  LeaseId lease = 0;
  // Until when this may be acted on without hearing from the store: the fence deadline (a
  // granted budget) on the member's clock; infinity otherwise.
  double valid_until_s = 0.0;
  std::string reason;
};
std::string_view StateName(Acting::State s);

// Whether the coordinator plans differently on member value `now` than on `put`, the one last
// put: what a member configured as `c` writes on change (member.cc says what the coordinator
// reads, and for what).
bool PlanInputsChanged(const Member& put, const Member& now, const MemberConfig& c);

struct MemberStatus {
  bool registered = false;
  LeaseId lease = 0;
  int64_t max_term = 0;
  std::string refused;     // why the job is not admitted, or why registration is refused
  bool duplicate = false;  // the name is taken: registered as a duplicate (counted at standby)
  std::string last_error;  // of the store
  uint64_t stale_grants_ignored = 0;
  uint64_t acks = 0;
  uint64_t puts = 0;  // of the member key (registration's included; not a duplicate's key)
  // What Current() last served, and how often it began serving the floor, fenced.
  Acting::State acting = Acting::State::kLocal;
  double acting_job_budget_w = 0.0;  // the budget Current() last served
  int64_t acting_term = 0;           // its grant's term (0: none)
  uint64_t fences = 0;
  uint64_t leases_lost = 0;     // renewals the store answered "lease gone" (expired)
  uint64_t store_resets = 0;    // times the store's revision went back (its state lost)
  uint64_t grants_watched = 0;  // newer grants WatchGrant took (not a read by Step)
  uint64_t watches = 0;         // WatchGrant's streams (Store::Follow calls)
};

class SiteMember {
 public:
  SiteMember(Store& store, MemberConfig config, std::function<double()> monotonic_s, Logger log);

  // The store's work: register (or re-register after losing the lease), keep the lease, put the
  // member key when it changed (checked every update_s) or every refresh_s, read the grant,
  // acknowledge what Current() has served.
  void Step() EXCLUDES(mu_);
  // Follows the grant key (Store::Follow) from where the last read left it, taking each grant
  // as it is written, so Current() serves it at once (docs/SITE.md, "Members watch their
  // grant"); `on_grant` is told each newer grant taken. Returns when nothing comes for
  // `quiet_s`, the stream fails (an error), or StopWatching is called: the caller calls it
  // again. Before Step's first read of the grant: an error at once. One thread (not Step's).
  Status WatchGrant(double quiet_s, const std::function<void()>& on_grant = {}) EXCLUDES(mu_);
  // Ends WatchGrant at once, and every later one (the store's CancelFollows): for a clean stop.
  void StopWatching();
  // What to act on now; records it as served (acknowledged at the next Step).
  Acting Current() EXCLUDES(mu_);
  // What Current() would serve now, not recorded (nothing is acknowledged for it).
  Acting Peek() const EXCLUDES(mu_);
  // Current(), recorded only when `serve` takes what it would serve (in one hold of the lock:
  // a grant taken by WatchGrant meanwhile is judged, never acknowledged unjudged); nothing
  // otherwise. A domain acknowledges a lower grant only once its own held watts fit under it.
  std::optional<Acting> ServeIf(const std::function<bool(const Acting&)>& serve) EXCLUDES(mu_);
  // From now on, these instead of the configuration's gpus, nameplate, floor, standby and
  // demand (a domain's sums, each period); put at once when the plan reads them differently.
  void Declare(const Declared& d) EXCLUDES(mu_);
  // The job's state after a decision: its power (with node overhead), phase, tokens/s.
  void Observe(double t_s, double power_w, std::string_view phase, double tokens_per_s)
      EXCLUDES(mu_);
  // The demand to publish from now on, in [floor, nameplate] (a job that knows what it will
  // draw: a trace); below 0, the configured rule again (nameplate, or by phase).
  void SetDemandW(double demand_w) EXCLUDES(mu_);
  // A clean stop: revoke the lease (the ledger keeps the floor until it forgets the job).
  void Leave() EXCLUDES(mu_);

  MemberStatus status() const EXCLUDES(mu_);
  const MemberConfig& config() const { return config_; }
  // The marginal value estimate (tokens/s per W) from the observations kept.
  double ValueTokensPerJ() const EXCLUDES(mu_);
  // The value curve from the observations kept: rollout decisions binned by job power (8 bins
  // of equal width between the lowest and highest), each bin's mean power and tokens/s; empty
  // with fewer than 8 rollout decisions or a power spread under 5 % of the mean.
  std::vector<ValuePoint> HistoryCurve() const EXCLUDES(mu_);
  // Where the job is in its step and what its steps look like, from the phases observed
  // (docs/SITE.md, "Staggering"): rollout, the rest of the step (log-probs to checkpoint), and
  // held ("idle"); each part's length and mean power as moving averages over the parts seen
  // (weight 0.3 for the newest). Absent until a rollout and a rest have both been seen.
  std::optional<StepTimeline> Timeline() const EXCLUDES(mu_);
  // The hold the site asks for before the job's next step, while that step is still to come
  // and the grant in force (0 s: none), and the step it is for (the member's count of rollouts
  // begun: an id the trainer honours once). The trainer honours it at its step boundary.
  HoldRequest PendingHold() EXCLUDES(mu_);
  double PendingHoldS() EXCLUDES(mu_) { return PendingHold().hold_s; }

 private:
  Acting CurrentLocked(double now_s) const REQUIRES(mu_);
  void ServeLocked(const Acting& a) REQUIRES(mu_);  // Current()'s record of what it served
  double ValueLocked() const REQUIRES(mu_);
  Member DemandLocked(LeaseId lease) const REQUIRES(mu_);  // what the member key publishes
  std::vector<ValuePoint> HistoryCurveLocked() const REQUIRES(mu_);
  std::optional<StepTimeline> TimelineLocked() const REQUIRES(mu_);
  double MeanTokensPerSLocked() const REQUIRES(mu_);
  bool Register(double now_s) EXCLUDES(mu_);
  // Step's parts, in its order (member.cc says what each does).
  bool KeepLease(double now_s) EXCLUDES(mu_);
  void PublishDemand(double now_s, LeaseId lease) EXCLUDES(mu_);
  // Whether the phase itself is published at each change (phase_demand, publish_phase_changes).
  bool PublishesPhase() const { return config_.phase_demand || config_.publish_phase_changes; }
  bool ReadGrant(double now_s) EXCLUDES(mu_);
  void Acknowledge(LeaseId lease) EXCLUDES(mu_);
  // Register's transaction on `lease`: the name, or else the duplicate's key (`m` naming the
  // predecessor seen gone, Member::replaces). The name found on `lease` already (an earlier try
  // applied, its answer lost): the member key put again and the duplicate's deleted. Where the
  // name's holder is this machine's process now gone: that duplicate key put again at once
  // naming it, and once what it may act on has run out (TTL - margin), its lease revoked and
  // the transaction tried again. Its answer.
  Result<TxnResult> TakeName(double now_s, LeaseId lease, const Member& m) EXCLUDES(mu_);
  // The store's revision as a read of it saw it; `before`, the highest seen before asking:
  // lower means the store's state was lost (terms, epochs and grants seen are forgotten).
  void SeenRevisionLocked(int64_t revision, int64_t before) REQUIRES(mu_);
  // A grant read (by Step or the watch) taken when it is for our lease and newer than ours
  // (epoch, then sequence); whether it was.
  bool TakeGrantLocked(const KeyValue& kv) REQUIRES(mu_);

  Store& store_;
  const MemberConfig config_;
  const Keys keys_;
  std::function<double()> now_s_;
  Logger log_;
  const double started_s_;  // when this process's member began (the reclaim waits on it)

  // The lease this member holds (Step's thread only, and Leave's after it): the registered one
  // (lease_ below says so to the other threads), or, before a registration is made, a spare
  // one kept alive, a duplicate's key on it, and used for the next try.
  Lease own_lease_;

  mutable Mutex mu_;
  LeaseId lease_ GUARDED_BY(mu_) = 0;  // own_lease_ while registered; 0 otherwise
  // The holder of the name last seen gone, and when (Step's thread only).
  std::string gone_holder_;
  double gone_seen_s_ = 0.0;
  int64_t lease_ttl_s_ GUARDED_BY(mu_) = 0;  // as granted
  double renewed_sent_s_ GUARDED_BY(mu_) = 0.0;
  bool registered_ GUARDED_BY(mu_) = false;
  std::optional<Grant> grant_ GUARDED_BY(mu_);  // the newest for lease_
  bool ever_granted_ GUARDED_BY(mu_) = false;   // in this process: the floor once fenced
  int64_t max_term_ GUARDED_BY(mu_) = 0;
  int64_t max_revision_ GUARDED_BY(mu_) = 0;  // the store's, as the grant reads saw it
  // Up to where the grant key is known (a read's revision, or the watch's): where the watch
  // resumes; 0: read it first.
  int64_t grant_revision_ GUARDED_BY(mu_) = 0;
  double grant_read_s_ GUARDED_BY(mu_) = -1e300;  // Step's last read of the grant
  int64_t served_seq_ GUARDED_BY(mu_) = 0;
  Acting served_ GUARDED_BY(mu_);
  int64_t acked_seq_ GUARDED_BY(mu_) = 0;
  // The member key: when it was last checked for a change, and at which phase; the value last
  // put (absent: none since registration) and when.
  double checked_s_ GUARDED_BY(mu_) = -1e300;
  std::string checked_phase_ GUARDED_BY(mu_);
  std::optional<Member> put_ GUARDED_BY(mu_);
  double put_s_ GUARDED_BY(mu_) = -1e300;
  double power_w_ GUARDED_BY(mu_) = 0.0;
  double demand_override_w_ GUARDED_BY(mu_) = -1.0;
  std::optional<Declared> declared_ GUARDED_BY(mu_);
  std::string phase_ GUARDED_BY(mu_) = "idle";
  // The step timeline.
  enum class Part { kNone, kRollout, kRest, kHeld };
  struct PartStats {
    bool seen = false;
    double length_s = 0.0, power_w = 0.0;  // moving averages
  };
  Part part_ GUARDED_BY(mu_) = Part::kNone;
  double part_start_s_ GUARDED_BY(mu_) = 0.0;
  double part_power_sum_w_ GUARDED_BY(mu_) = 0.0;
  int part_samples_ GUARDED_BY(mu_) = 0;
  double last_observed_s_ GUARDED_BY(mu_) = 0.0;
  PartStats rollout_ GUARDED_BY(mu_), rest_ GUARDED_BY(mu_), held_ GUARDED_BY(mu_);
  int64_t steps_seen_ GUARDED_BY(mu_) = 0;   // rollouts begun
  int64_t held_step_ GUARDED_BY(mu_) = 0;    // the step a hold has begun before
  double held_for_s_ GUARDED_BY(mu_) = 0.0;  // that hold's length
  struct Observation {
    double t_s, power_w, tokens_per_s;
    bool rollout;
  };
  std::deque<Observation> observations_ GUARDED_BY(mu_);
  MemberStatus status_ GUARDED_BY(mu_);
};

}  // namespace headroom::coord
