// The Store in memory, with etcd's semantics (store.h): one revision counter, create/mod
// revisions and versions, leases that expire on the caller's clock, atomic transactions, and a
// history for watches. For unit tests and for `headroom fleet-sim` with nothing to install.
// Thread-safe. Faults for tests: SetUnavailable (every call fails, as an unreachable etcd),
// FailNextWriteAfterApply (a write applied, then reported with an unknown outcome), ExtendLeases
// (a leader failover) and LoseState (etcd wiped and started empty).
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <string>

#include "common/thread_annotations.h"
#include "coord/store.h"

namespace headroom::coord {

// etcd's default --max-txn-ops.
inline constexpr size_t kEtcdMaxTxnOps = 128;

class MemoryStore final : public Store {
 public:
  // `now_s`: the clock leases expire on (seconds, any origin, never decreasing).
  explicit MemoryStore(std::function<double()> now_s, size_t history_keep = 100000);

  Result<RangeResult> Get(const std::string& key, bool prefix) override;
  Result<int64_t> Put(const std::string& key, const std::string& value, LeaseId lease) override;
  Result<int64_t> Delete(const std::string& key, bool prefix) override;
  Result<TxnResult> Txn(const TxnRequest& request) override;
  Result<LeaseId> LeaseGrant(int64_t ttl_s) override;
  Result<int64_t> LeaseKeepAlive(LeaseId lease) override;
  Status LeaseRevoke(LeaseId lease) override;
  Result<WatchResult> Watch(const std::string& key, bool prefix, int64_t after_revision,
                            double wait_s) override;
  Status Compact(int64_t revision) override EXCLUDES(mu_);
  std::string Describe() const override { return "memory"; }

  // Faults.
  void SetUnavailable(bool unavailable) EXCLUDES(mu_);
  void FailNextWriteAfterApply() EXCLUDES(mu_);
  // Extends every lease by `s` (what an etcd leader failover does: leases are extended, never
  // shortened).
  void ExtendLeases(double s) EXCLUDES(mu_);
  // Loses every key, lease and the history, the revision back at 1: a new cluster on empty
  // data, or a restore from a snapshot older than what clients saw.
  void LoseState() EXCLUDES(mu_);

  int64_t revision() const EXCLUDES(mu_);
  int64_t writes() const EXCLUDES(mu_);  // successful write calls (puts, deletes, txns)

 private:
  struct Lease {
    int64_t ttl_s = 0;
    double expires_s = 0.0;
  };
  Status Check() REQUIRES(mu_);       // unavailable?
  void ExpireLeases() REQUIRES(mu_);  // at the clock's now
  void PutLocked(const std::string& key, const std::string& value, LeaseId lease, int64_t rev)
      REQUIRES(mu_);
  bool DeleteLocked(const std::string& key, bool prefix, int64_t rev) REQUIRES(mu_);
  std::vector<KeyValue> GetLocked(const std::string& key, bool prefix) const REQUIRES(mu_);
  bool Holds(const Compare& c) const REQUIRES(mu_);
  // A write that changed something: the revision it gets.
  int64_t NextRevision() REQUIRES(mu_) { return revision_ + 1; }
  Status Applied() REQUIRES(mu_);  // the unknown-outcome fault, once

  std::function<double()> now_s_;
  const size_t history_keep_;
  mutable Mutex mu_;
  std::map<std::string, KeyValue> kvs_ GUARDED_BY(mu_);
  std::map<LeaseId, Lease> leases_ GUARDED_BY(mu_);
  std::deque<WatchEvent> history_ GUARDED_BY(mu_);
  int64_t revision_ GUARDED_BY(mu_) = 1;   // etcd starts at 1
  int64_t compacted_ GUARDED_BY(mu_) = 1;  // history holds every event after this revision
  LeaseId next_lease_ GUARDED_BY(mu_) = 0x1000;
  int64_t writes_ GUARDED_BY(mu_) = 0;
  bool unavailable_ GUARDED_BY(mu_) = false;
  bool fail_next_write_ GUARDED_BY(mu_) = false;
};

}  // namespace headroom::coord
