// The key-value store the coordinator and the agents share (docs/SITE.md): etcd's data model,
// as much of it as headroom uses. Two implementations with the same semantics: EtcdStore
// (etcd_store.h, the one file that talks to etcd, through its v3 JSON gateway) and MemoryStore
// (memory_store.h: revisions, leases that expire on an injected clock, transactions, watches),
// for unit tests and for `headroom fleet-sim` with nothing to install.
//
// Semantics (etcd v3's):
// - every successful write (put, delete, a transaction that changes anything) increases the
//   store's revision by one; a key's mod_revision is the revision of its last write, its
//   create_revision that of its creation (0 for a key that does not exist), its version the
//   number of writes since its creation;
// - a key put with a lease is deleted when the lease expires or is revoked;
// - a transaction evaluates every comparison against one snapshot; all true -> its success
//   operations, else its failure operations, atomically, as one revision;
// - a failed call of kind ErrorKind::kOutcomeUnknown (a timeout after the request was sent)
//   may have been applied: callers resolve it by reading back what they wrote with it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace headroom::coord {

using LeaseId = int64_t;

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  LeaseId lease = 0;  // 0: none
};

struct RangeResult {
  std::vector<KeyValue> kvs;  // sorted by key
  int64_t revision = 0;       // the store's revision when read
};

// One comparison of a transaction, on one key (a missing key has create_revision, mod_revision
// and version 0; every value comparison on a missing key is false, kNotEqual included, as in
// etcd).
struct Compare {
  enum class Target { kValue, kCreateRevision, kModRevision, kVersion, kLease };
  enum class Result { kEqual, kNotEqual, kLess, kGreater };
  std::string key;
  Target target = Target::kModRevision;
  Result result = Result::kEqual;
  int64_t number = 0;  // for every target but kValue
  std::string value;   // for kValue

  static Compare ModRevision(std::string key, Result r, int64_t n) {
    return {std::move(key), Target::kModRevision, r, n, {}};
  }
  static Compare CreateRevision(std::string key, Result r, int64_t n) {
    return {std::move(key), Target::kCreateRevision, r, n, {}};
  }
  static Compare Value(std::string key, Result r, std::string v) {
    return {std::move(key), Target::kValue, r, 0, std::move(v)};
  }
};

struct Op {
  enum class Kind { kPut, kDelete, kGet };
  Kind kind = Kind::kGet;
  std::string key;
  std::string value;    // kPut
  LeaseId lease = 0;    // kPut
  bool prefix = false;  // kDelete, kGet: every key starting with `key`

  static Op Put(std::string key, std::string value, LeaseId lease = 0) {
    return {Kind::kPut, std::move(key), std::move(value), lease, false};
  }
  static Op Delete(std::string key, bool prefix = false) {
    return {Kind::kDelete, std::move(key), {}, 0, prefix};
  }
  static Op Get(std::string key, bool prefix = false) {
    return {Kind::kGet, std::move(key), {}, 0, prefix};
  }
};

// A transaction may not write one key twice (etcd refuses it: "duplicate key given in txn
// request").
struct TxnRequest {
  std::vector<Compare> compare;
  std::vector<Op> success;
  std::vector<Op> failure;
};

struct TxnResult {
  bool succeeded = false;
  int64_t revision = 0;  // the store's revision after the transaction
  // One entry per operation of the branch taken; the keys read for a kGet (empty otherwise).
  std::vector<std::vector<KeyValue>> responses;
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;  // for a delete: key and mod_revision (the deletion's revision)
};

struct WatchResult {
  std::vector<WatchEvent> events;  // in revision order
  // Where to resume (the next call's after_revision): the last event's revision when there are
  // events (etcd sends a long history in parts), else the store's revision when answered.
  int64_t revision = 0;
  bool compacted = false;  // the history after `after_revision` is gone: read afresh
};

// etcd's prefix rule (clientv3.GetPrefixRangeEnd): the end of the range of keys starting with
// `key`: its last byte below 0xff incremented, the bytes after it dropped; "\0" (every key from
// `key` on) when there is none. One rule for every store.
inline std::string PrefixEnd(std::string_view key) {
  std::string end(key);
  while (!end.empty()) {
    const auto last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

class Store {
 public:
  virtual ~Store() = default;

  // The key, or with `prefix` every key under it.
  virtual Result<RangeResult> Get(const std::string& key, bool prefix = false) = 0;
  // Returns the revision of the write.
  virtual Result<int64_t> Put(const std::string& key, const std::string& value,
                              LeaseId lease = 0) = 0;
  virtual Result<int64_t> Delete(const std::string& key, bool prefix = false) = 0;
  virtual Result<TxnResult> Txn(const TxnRequest& request) = 0;
  // Transactions independent of each other (none compares what another writes), each answered
  // in its place: a store may send them at once (the etcd one does, on a few connections). This
  // default sends them one after another.
  virtual std::vector<Result<TxnResult>> TxnEach(const std::vector<TxnRequest>& requests) {
    std::vector<Result<TxnResult>> out;
    out.reserve(requests.size());
    for (const TxnRequest& request : requests) out.push_back(Txn(request));
    return out;
  }

  // A lease of `ttl_s` seconds (etcd rounds up to whole seconds, with its own minimum).
  virtual Result<LeaseId> LeaseGrant(int64_t ttl_s) = 0;
  // Renews the lease; returns the TTL it now has, or an error when it no longer exists
  // (expired or revoked: `LeaseGone`).
  virtual Result<int64_t> LeaseKeepAlive(LeaseId lease) = 0;
  virtual Status LeaseRevoke(LeaseId lease) = 0;

  // The changes to `key` (or under it, with `prefix`) after `after_revision`, waiting up to
  // `wait_s` for the first when there is none yet (the in-memory store never waits: its clock
  // is the caller's).
  virtual Result<WatchResult> Watch(const std::string& key, bool prefix, int64_t after_revision,
                                    double wait_s) = 0;

  // A watch that stays open (docs/SITE.md, "Members watch their grant"): `on_change` is told
  // once the watch is created (no events; `revision` the store's then) and then each batch of
  // changes after `after_revision` as it comes (or `compacted`), until it returns false, nothing
  // comes for `quiet_s`, the stream fails, or CancelFollows is called. Returns the revision to
  // resume from. This default, for stores whose Watch does not wait: one Watch, told as one
  // batch (created, then the changes if any).
  virtual Result<int64_t> Follow(const std::string& key, bool prefix, int64_t after_revision,
                                 double quiet_s,
                                 const std::function<bool(const WatchResult&)>& on_change) {
    auto r = Watch(key, prefix, after_revision, quiet_s);
    if (!r) return std::move(r).error();
    if (!on_change(WatchResult{{}, r->revision, false})) return after_revision;
    if (!r->events.empty() || r->compacted) on_change(*r);
    return r->compacted ? after_revision : r->revision;
  }
  // Whether Watch waits for a change when there is none yet (etcd), so that a watch that stays
  // open (a FollowedFeed, coord/site_feed.h) is the way to follow a prefix; false for a store
  // that answers at once (MemoryStore: polled).
  virtual bool WatchWaits() const { return false; }
  // Ends every Follow in progress at once (each returns an error) and makes later ones fail at
  // once: for a clean stop. Thread-safe.
  virtual void CancelFollows() {}

  // Drops the history up to `revision` (watches from before it are told `compacted`); the keys
  // as they are stay. A revision already compacted is not an error.
  virtual Status Compact(int64_t revision) = 0;

  // Where the store is, for messages ("memory", "http://127.0.0.1:2379").
  virtual std::string Describe() const = 0;
};

// The words every implementation puts in the message of these errors, for people; callers tell
// the errors apart by their kind (common/error.h), never by the message.
inline constexpr std::string_view kLeaseGone = "lease not found";
inline constexpr std::string_view kOutcomeUnknown = "outcome unknown";
// A lease the store does not have (expired or revoked): ErrorKind::kNotFound from a lease call,
// or from a write under the lease.
inline bool IsLeaseGone(const Error& e) { return e.kind() == ErrorKind::kNotFound; }
// A write sent without an answer: it may have been applied.
inline bool IsOutcomeUnknown(const Error& e) { return e.kind() == ErrorKind::kOutcomeUnknown; }

}  // namespace headroom::coord
