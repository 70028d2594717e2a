// One lease and the rule for keeping it alive, under every holder: the site member
// (member.h), the coordinator (coordinator.h), LeaseKeeper's thread (lease_keeper.h) and a
// DiLoCo worker on its own clock (diloco/worker.cc). What each holder does about a failure is
// its own (the member fences, the coordinator steps down, the worker keeps the error's kind);
// when to renew and what an answer means is this:
//
//   - Grant: a new lease of ttl_s (a lease held before is forgotten, not revoked).
//   - Due: renew_after_s (a third of the TTL unless given) has passed since the last renewal,
//     or the grant, was sent. Times are when a request was *sent*: the store's TTL runs from a
//     moment after it, so a deadline counted from the sending is early, never late (the
//     member's fencing rests on that).
//   - Renew: answered, renewed_s() is the sending time and ttl_s() the TTL the store answered
//     (at most the one asked for). Lease gone (IsLeaseGone: expired or revoked): the lease is
//     forgotten (held() is false) and the error returned; the holder grants a new one. Any
//     other failure (unreachable, no answer) keeps it: whether it lives is unknown until an
//     answer, and renewed_s() still says when it was last known to.
//   - Revoke: ends it in the store (a clean stop) and forgets it, whatever the answer.
//
// Pure of clocks and threads: every time is passed in (seconds on the holder's monotonic
// clock, any origin, never decreasing). Not thread-safe: one thread at a time.
#pragma once

#include <cstdint>

#include "common/error.h"
#include "coord/store.h"

namespace headroom::coord {

class Lease {
 public:
  // REQUIRES: `store` outlives the Lease; ttl_s >= 1 for Grant (0: not known, for a lease
  // only adopted). renew_after_s <= 0 means a third of ttl_s.
  Lease(Store& store, int64_t ttl_s, double renew_after_s = 0.0);

  // A new lease, its TTL counted from `sent_s`. On an error none is held.
  Status Grant(double sent_s);
  // A lease granted by another (LeaseKeeper's holder), as if granted here at `renewed_s`.
  void Adopt(LeaseId id, double renewed_s);
  // Whether a lease is held and renew_after_s has passed since its last renewal was sent.
  bool Due(double now_s) const;
  // Renews now (sent at `sent_s`), due or not. Without a lease: a lease-gone error (kNotFound,
  // kLeaseGone), the store not asked.
  Status Renew(double sent_s);
  // Renew when Due; OK otherwise.
  Status RenewIfDue(double now_s) { return Due(now_s) ? Renew(now_s) : OkStatus(); }
  // Forgets the lease, the store not told (it expires on its own).
  void Forget() { id_ = 0; }
  // Revokes the lease held (OK when none) and forgets it, whatever the store answers.
  Status Revoke();

  bool held() const { return id_ != 0; }
  LeaseId id() const { return id_; }  // 0 when none is held
  // When the last renewal (or the grant) that the store answered was sent.
  double renewed_s() const { return renewed_s_; }
  // The TTL as the store last answered it, at most the one asked for.
  int64_t ttl_s() const { return ttl_s_; }
  double renew_after_s() const { return renew_after_s_; }

 private:
  Store* store_;
  int64_t asked_ttl_s_;
  double renew_after_s_;
  LeaseId id_ = 0;
  int64_t ttl_s_ = 0;
  double renewed_s_ = 0.0;
};

}  // namespace headroom::coord
