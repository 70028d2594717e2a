// A lease kept alive on a thread of its own until stopped -- the keep-alive half of etcd's
// Session, for a holder whose own loop may block longer than the lease lives (a DiLoCo worker
// in a collective waiting on a slow peer, up to its timeout). Every period_s it renews the
// lease (coord::Lease's Renew); a store that does not answer is retried next period, a lease
// the store no longer has (IsLeaseGone) is lost for good: the thread ends and lost() says so.
// Waits on the steady clock (the one clock of its own: a member's step loop takes the
// caller's, coord/member_session.h). Thread-safe: lost() from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <thread>

#include "common/thread_annotations.h"
#include "coord/lease.h"
#include "coord/store.h"

namespace headroom::coord {

class LeaseKeeper {
 public:
  // REQUIRES: period_s > 0; `store` outlives the keeper and is safe to call from its thread.
  LeaseKeeper(Store& store, LeaseId lease, double period_s);
  ~LeaseKeeper();  // Stop
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  // Ends the thread at once (a wait for the next renewal ends) and joins it. Idempotent; does
  // not revoke the lease (that is the holder's, as leaving is a member's).
  void Stop() EXCLUDES(mu_);
  bool lost() const { return lost_.load(); }
  int64_t renewals() const { return renewals_.load(); }  // answered keep-alives

 private:
  void Loop() EXCLUDES(mu_);

  Lease lease_;  // the thread's alone
  const double period_s_;
  Mutex mu_;
  std::condition_variable_any cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::atomic<bool> lost_{false};
  std::atomic<int64_t> renewals_{0};
  std::thread thread_;
};

}  // namespace headroom::coord
