// The coordinator's decision, one period at a time: from the ledger it read, the members, their
// acknowledgements and which leases are gone, the next ledger and the grants to write. Pure: no
// store, no clock (docs/SITE.md, "The protocol", states the invariant this keeps and why).
//
//   1. A grant acknowledged (the agent acts on it from its next decision) lowers the job's held
//      watts to it. A job whose lease is gone has fenced itself to its floor (the agent's own
//      clock runs out before the store's lease does) and holds at its step boundary: held =
//      grant = floor. Its floor is forgotten after `forget_after_s` without a member and
//      kForgetSteps of its declared steps (LedgerJob::step_s); its standby then stays counted
//      (a fenced StandbyJob) until it registers again, or for forget_after_s more. A member key
//      alive but unreadable is not gone: the job keeps its lease, demand and held watts.
//   1a. A domain (Member::domain: a domain coordinator under this site, docs/SITE.md "Domains")
//      whose lease is gone keeps its held watts and its grant -- its jobs may still draw them --
//      and is never forgotten; a new lease takes its place holding the same, and its grant is
//      acknowledged lower only once the domain's own held watts fit under it. Its floor follows
//      its member's: down at once, up into what it holds or what is free.
//   1b. Every registered job not admitted (waiting, refused, a duplicate name) is counted in the
//      ledger's standby at what it may draw (StandbyChargeW), from its registration until it is
//      admitted or forgotten; a duplicate's entry goes at once when its lease takes the name.
//      A duplicate that is the admitted job's agent restarted (Member::replaces names the holder
//      of the job's member, the same gpus) is charged only its standby above the job's floor:
//      the same GPUs, counted once. A duplicate that is another replica of the admitted domain of
//      its name (Member::domain, the same holder: the domain's new leader while the old one's
//      lease lives on) is charged only what it declares above what the domain holds.
//   2. Admission, in order of registration: a member not in the ledger whose floor fits next to
//      the floors of the jobs admitted (against the lower of the budget in force and the one
//      asked for) is admitted at its floor once that much is not held; until then it waits,
//      its floor kept out of the others' targets so that their grants come down. One whose
//      floor does not fit is refused, with the numbers. Running jobs' floors are never taken.
//      Admission moves a job from its standby to its floor once floor - standby is free; the
//      standby of every other job not admitted takes room as the floors do.
//      (A site budget increase is in force before any of this.)
//   3. Targets: every floor covered (raised, for a job whose update is reserved, to its update's
//      watts: PlanInput::reserved_w), the rest split in proportion to demand above floor
//      (Allocate) or by value (AllocateByValue: the members' value curves; a member without one,
//      a straight line at its average value), capped at demand.
//   4. Down first: grants above their target are lowered at once (held stays until acked); a
//      grant below its target and below what its job still holds rises to the lower of the two
//      at once (held counts those watts already); above held, grants are raised only into
//      room = budget - reserve - sum of held, shared in proportion to what each still wants; a
//      raised grant is held at once.
//   5. A site budget decrease is in force once the sum of held fits under it.
// Invariant, checked before anything is written: sum of the guaranteed jobs' held_w and every
// standby <= site_budget_w - reserve_w; without loans, the opportunistic jobs' held_w are inside
// it too. A newcomer's standby is drawn without asking (its GPUs are on): when it does not fit,
// the ledger is over until grants come down (or, when even the floors cannot make room,
// Ledger::OvercommittedW says by how much), and a plan may then be written only if it raises
// nothing (RaisedW).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/log.h"
#include "coord/layout.h"
#include "coord/value_allocation.h"

namespace headroom::coord {

struct AllocationJob {
  double floor_w = 0.0;
  double demand_w = 0.0;  // >= floor_w
};

// Every floor, and the rest of `available_w` in proportion to demand above floor, capped at
// demand. REQUIRES: the floors fit in available_w.
std::map<std::string, double> Allocate(double available_w,
                                       const std::map<std::string, AllocationJob>& jobs);

enum class Allocation {
  kProportional,  // Allocate: in proportion to demand above floor (the first version)
  kValue,         // AllocateByValue on the members' value curves (docs/SITE.md)
};

struct PlanInput {
  std::map<std::string, Member> members;         // valid members by job
  std::map<std::string, int64_t> registered_at;  // their create_revision: admission order
  std::map<std::string, Ack> acks;               // valid acks by job
  std::map<std::string, Grant> grants;           // as stored, by job
  std::map<std::string, double> gone_for_s;      // ledger jobs with no member, for how long
  // Member keys that exist (their lease alive) but whose value cannot be read (a newer version,
  // a hand edit, a non-finite number): job -> the key's lease. Unknown is not gone: a job whose
  // ledger lease is the key's keeps what it holds and is never forgotten while the key lives.
  std::map<std::string, LeaseId> unreadable;
  // Second agents under taken names (members/<job>@<lease hex>), by that key's name: counted at
  // standby, never admitted.
  std::map<std::string, Member> duplicates;
  double forget_after_s = 60.0;
  // The ledger's epoch (its key's create_revision), written into every grant; a stored grant
  // of another epoch is written again.
  int64_t epoch = 0;
  // A ledger new in this store (the first, or rebuilt after a deletion or the store's state
  // lost) knows only the agents registered so far; others may act on their floors (fenced) or
  // on an older epoch's grant. It raises no grant until every live agent has registered (the
  // coordinator: a lease TTL and two periods).
  bool no_raises = false;
  Allocation allocation = Allocation::kProportional;
  Fairness fairness = Fairness::kNone;  // with kValue
  // Staggering's holds by job (coord/stagger.h): written with the job's grant, which is
  // rewritten when its hold changes. A job absent: no hold.
  struct Hold {
    double hold_s = 0.0;
    int64_t hold_step = 0;
  };
  std::map<std::string, Hold> holds;
  // Reservations before the update (coord/reservation.h) in force now: a guaranteed job's floor
  // in the targets is raised to these watts (at most its demand) while its update runs, so that
  // the others' grants come down to make the room first. Ignored, all of them, when the raised
  // floors do not fit (the reservation planner keeps them within the budget).
  std::map<std::string, double> reserved_w;
  // Loans (docs/SITE.md, "Job classes"): opportunistic jobs may also borrow what the
  // guaranteed jobs are expected not to draw over the next loan_lead_s (their published power,
  // and their step timeline's prediction, x (1 + loan_margin); in rollout, or with no power
  // published, all they hold), less loan_cover x the largest single job's unused part. Only in
  // a steady site: none while a guaranteed grant waits to rise, a newcomer waits, or a budget
  // decrease settles. loan_cover 0 and loan_lead_s 0: no loans.
  double loan_lead_s = 0.0;
  double loan_margin = 0.05;
  double loan_cover = 0.5;
};

struct PlanOutput {
  Ledger ledger;                       // next
  std::vector<Grant> grants;           // to write (changed only)
  std::vector<std::string> forgotten;  // jobs whose grant key to delete
  bool changed = false;                // anything to write
  std::vector<LogEvent> log;
  // What the opportunistic jobs' targets were computed from: what the guaranteed targets
  // leave, or the loans when more.
  double opportunistic_pool_w = 0.0;
  // Jobs first counted by this plan (a new registration, or a new lease), at what they may draw
  // on arrival -- drawn without asking, so not a raise (RaisedW).
  std::map<std::string, double> arrivals_w;
};

// `ledger`: as read; `term`: the leader's.
PlanOutput Plan(const Ledger& ledger, const PlanInput& in, int64_t term);

// The invariant's slack (>= 0 when it holds), within a rounding tolerance of 1e-6 W per job.
double InvariantSlackW(const Ledger& ledger);

// What `after` holds for admitted jobs above what `before` held for them (admitted, or in
// standby), or, for a job `before` did not count, above what it drew on arrival: 0 for a plan
// that only lowers, which may be written even while over.
double RaisedW(const Ledger& before, const PlanOutput& after);

}  // namespace headroom::coord
