// The store's layout under /headroom/<site>/ and its JSON values (docs/SITE.md, "The store"):
//   leader          the leading coordinator (on its lease); its create_revision is the term
//   ledger          the site's budget and every admitted job's floor, grant and held watts
//   target          the operator's last site budget and reserve (POST /v1/site-budget)
//   members/<job>   an agent's demand (on the agent's lease)
//   members/<job>@<lease hex>  a second agent under a name taken: counted at standby, never
//                   admitted (docs/SITE.md, "Every job at the site")
//   grants/<job>    the leader's grant to the job (written with the ledger, in one transaction)
//   acks/<job>      the grant the agent acts on (on the agent's lease)
// Every value is a JSON object; one that does not parse, or lacks a field, is ignored by its
// readers (and logged), never trusted in part. Watts are whole-job (GPUs and node overhead).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "coord/stagger.h"
#include "coord/store.h"
#include "coord/value_allocation.h"

namespace headroom::coord {

struct Keys {
  explicit Keys(std::string_view site);
  std::string root;  // "/headroom/<site>/"
  std::string leader() const { return root + "leader"; }
  std::string ledger() const { return root + "ledger"; }
  std::string target() const { return root + "target"; }
  std::string members() const { return root + "members/"; }
  std::string grants() const { return root + "grants/"; }
  std::string acks() const { return root + "acks/"; }
  std::string member(std::string_view job) const { return members() + std::string(job); }
  // A duplicate's key: the name taken, "@", its lease in hex ('@' is never in a name).
  std::string duplicate(std::string_view job, int64_t lease) const;
  std::string grant(std::string_view job) const { return grants() + std::string(job); }
  std::string ack(std::string_view job) const { return acks() + std::string(job); }
};

// A site or job name: 1-64 of [A-Za-z0-9._-] (it becomes part of keys).
Status CheckName(std::string_view name, std::string_view what);

// A Slurm job id as SLURM_JOB_ID has it: 1 to 18 digits, no leading zero, optionally
// `_<task>` of an array job (a member's slurm_job).
bool IsSlurmJobId(std::string_view id);

inline constexpr size_t kMaxValuePoints = 32;

// Every value written carries "v": kValueVersion. A reader reads its own version and the one
// before (absent "v": the values before versions, 0); a newer one is unreadable, and an unreadable
// member keeps the watts it holds (docs/SITE.md, "Unknown is not gone").
inline constexpr int64_t kValueVersion = 1;

// A job's class (docs/SITE.md, "Job classes"): a guaranteed job (every job before this) is
// granted from the site budget less the reserve; an opportunistic one (DiLoCo workers on spare
// power) only from what every guaranteed job's target leaves, and shrinks first. An
// opportunistic job's floor is 0: at a grant of 0 it pauses.
enum class JobClass { kGuaranteed, kOpportunistic };
const char* JobClassName(JobClass c);  // "guaranteed", "opportunistic"

struct Member {
  std::string job;
  int gpus = 0;
  double nameplate_w = 0.0;  // the GPUs' nameplate plus the node overhead
  double floor_w = 0.0;      // the job's power at its lowest actuation, with the node overhead
  double demand_w = 0.0;     // what it would draw unconstrained (first version: nameplate_w)
  double power_w = 0.0;      // now, with the node overhead
  double node_overhead_w = 0.0;
  std::string phase;
  double value_tokens_per_j = 0.0;  // marginal value of power: tokens/s per W (docs/SITE.md)
  double budget_w = 0.0;            // the job budget it acts on now
  LeaseId lease = 0;
  // Tokens/s against job budget in the phase the budget steers (docs/SITE.md, "Allocation by
  // value"); optional (empty: none), at most kMaxValuePoints points.
  std::vector<ValuePoint> value_curve;
  // The agent process holding the registration (common/process_identity.h); optional, "" when
  // unknown. A restarted agent on the same machine takes the place of one that is gone.
  std::string holder{};
  // A duplicate's only (members/<job>@<lease hex>): the holder of the name it has seen gone on
  // its own machine (its predecessor: the same job on the same GPUs, restarted). The leader
  // charges such a duplicate only its standby above the admitted job's floor while that job's
  // member names this holder and the same gpus (docs/SITE.md, "Every job at the site").
  // JSON "replaces", optional ("" when absent).
  std::string replaces;
  // Where the job is in its step and what its steps look like (coord/stagger.h); optional
  // (`timeline` absent: has_timeline false). `tokens_per_s`: over whole steps.
  bool has_timeline = false;
  StepTimeline timeline;
  double tokens_per_s = 0.0;
  // JSON "class", optional ("guaranteed" when absent).
  JobClass job_class = JobClass::kGuaranteed;
  // The Slurm job the member runs in (SLURM_JOB_ID), optional ("" when absent): a coordinator
  // with --slurm suspends and resumes it (slurm/suspender.h).
  std::string slurm_job;
  // Its GPUs idle plus the node overhead: what it draws while its trainer holds (docs/SITE.md,
  // "Every job at the site"). JSON "standby_w", optional; below 0 when absent (then the floor).
  double standby_w = -1.0;
  // What its update (the part of its step after the rollout) draws unconstrained, with the node
  // overhead: the watts a reservation before the update holds for it (coord/reservation.h).
  // JSON "update_w", optional; 0 when absent (then the timeline's measured rest_w).
  double update_w = 0.0;
  // A domain coordinator under this site (docs/SITE.md, "Domains"), not an agent: its floor is
  // its own jobs' floors, standby and reserve, and may move while registered; its lease gone,
  // it keeps the watts it holds (its jobs may still draw them) until it registers again and
  // acknowledges lower. JSON "domain", optional (false when absent).
  bool domain = false;
};

// The phases in which a job's trainer runs no step (it holds, loads, or has stopped): "idle",
// "startup", "stopped".
bool IsHeldPhase(std::string_view phase);

// What a registered job not admitted may draw now: its standby (at most its floor) while its
// trainer holds; its floor while a step may run (a trainer mid-step when its agent starts
// finishes that step at the lowest actuation), or when it publishes no standby.
double StandbyChargeW(const Member& m);

struct Grant {
  std::string job;
  int64_t term = 0;  // the leader's election revision: the fencing token
  // The ledger's epoch: its key's create_revision. A ledger rebuilt (deleted, or the store's
  // state lost) starts a new epoch; agents order grants by (epoch, seq). JSON "epoch",
  // optional (0: before epochs).
  int64_t epoch = 0;
  int64_t seq = 0;    // the ledger's grant sequence: higher is newer within an epoch
  LeaseId lease = 0;  // the member it is for (a restarted agent ignores its predecessor's)
  double job_budget_w = 0.0;
  bool admitted = true;
  std::string reason;
  // Staggering: wait `hold_s` before starting step `hold_step` (the member's count), if it has
  // not begun. Optional in JSON (0: none).
  double hold_s = 0.0;
  int64_t hold_step = 0;
};

struct Ack {
  std::string job;
  int64_t term = 0;
  int64_t seq = 0;
  LeaseId lease = 0;
  double job_budget_w = 0.0;
};

struct LedgerJob {
  double floor_w = 0.0;
  double demand_w = 0.0;
  double grant_w = 0.0;  // the latest grant
  // What the job may be acting on: >= every grant it has not acknowledged being past. The
  // invariant: sum of held_w <= site_budget_w - reserve_w.
  double held_w = 0.0;
  int64_t seq = 0;    // of the latest grant
  LeaseId lease = 0;  // the member it is addressed to; 0: none (its lease is gone)
  JobClass job_class = JobClass::kGuaranteed;  // JSON "class", optional as in Member
  // What its agent draws held (its member's standby_w; below 0: unknown, then the floor): what
  // stays counted once its floor is forgotten. JSON "standby_w", optional.
  double standby_w = -1.0;
  // The longest step its member declared (its timeline's rollout + rest, whole seconds; 0:
  // none): a job whose lease is gone may still be running that step, fenced at its floor, so
  // the floor is not forgotten sooner than kForgetSteps of them. JSON "step_s", optional.
  double step_s = 0.0;
  // A domain (Member::domain): its lease gone, held and grant are kept and it is never
  // forgotten; its floor follows its member's. JSON "domain", optional.
  bool domain = false;
  // A domain's holder (Member::holder, the same for all its replicas): another replica that
  // registers under its name is charged only what it adds. JSON "holder", optional.
  std::string holder{};
};
// A job whose lease is gone keeps its floor for at least this many of its declared steps.
inline constexpr double kForgetSteps = 2.0;

// A registered job not admitted (waiting, refused, or a duplicate name): counted at what it may
// draw (StandbyChargeW) from its registration until it is admitted or forgotten.
struct StandbyJob {
  double standby_w = 0.0;  // the charge: counted in HeldW
  double floor_w = 0.0;    // what admission needs
  LeaseId lease = 0;
  bool duplicate = false;  // a second agent under a taken name: never admitted
  // An admitted job whose floor was forgotten while its agent was fenced (its lease gone): held
  // at its step boundary, it draws its standby, so that stays counted until it registers again
  // or for forget_after_s more (fenced means held; docs/SITE.md). How long the job had been
  // gone when its floor was forgotten; below 0: not such a job. JSON "fenced_gone_s", optional.
  double fenced_gone_s = -1.0;
};

struct Ledger {
  int64_t term = 0;                   // of the leader that wrote it
  std::string request_id;             // of the transaction that wrote it
  double site_budget_w = 0.0;         // in force: what the invariant holds against
  double target_site_budget_w = 0.0;  // asked for; below site_budget_w while a decrease settles
  double reserve_w = 0.0;             // in force
  // Asked for while an increase of the reserve settles (in force once the held watts fit, as a
  // budget decrease); below 0: none. JSON "target_reserve_w", optional.
  double target_reserve_w = -1.0;
  // The target key's mod_revision last applied (0: none). JSON "target_revision", optional.
  int64_t target_revision = 0;
  int64_t seq = 0;             // the last grant sequence used
  uint64_t reassignments = 0;  // grants raised with watts another job gave up
  std::map<std::string, LedgerJob> jobs;
  // Registered, not admitted, by job (a duplicate by its key's name, "<job>@<lease hex>").
  // JSON "standby", optional (absent: none).
  std::map<std::string, StandbyJob> standby;

  // What every job may draw: the admitted jobs' held watts and the others' standby.
  double HeldW() const;
  double HeldW(JobClass c) const;  // of one class (standby jobs are guaranteed)
  double StandbyW() const;         // the standby jobs' alone
  // The reserve asked for: target_reserve_w while one settles, else the reserve in force.
  double TargetReserveW() const { return target_reserve_w >= 0.0 ? target_reserve_w : reserve_w; }
  double FloorsW() const;  // the admitted jobs'
  // What cannot fit even with every admitted job at its floor: the admitted floors and every
  // standby over the budget asked for less the reserve asked for (0 when it fits).
  double OvercommittedW() const;
};

// The operator's last target, in a key of its own: it survives leader changes and a ledger
// rebuilt after a loss (docs/SITE.md, "Operator requests are durable").
struct Target {
  double site_budget_w = 0.0;
  double reserve_w = 0.0;
  std::string request_id;  // the replica and request that wrote it
};

std::string ToJson(const Target& t);
Result<Target> TargetFromJson(std::string_view text, std::string_view where);
std::string ToJson(const Member& m);
std::string ToJson(const Grant& g);
std::string ToJson(const Ack& a);
std::string ToJson(const Ledger& l);
// "where" names the key for the message.
Result<Member> MemberFromJson(std::string_view text, std::string_view where);
Result<Grant> GrantFromJson(std::string_view text, std::string_view where);
Result<Ack> AckFromJson(std::string_view text, std::string_view where);
Result<Ledger> LedgerFromJson(std::string_view text, std::string_view where);

}  // namespace headroom::coord
