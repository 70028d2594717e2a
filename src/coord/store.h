// The key-value store the coordinator and the agents share (docs/FLEET.md): etcd's data model,
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
// - a failed call whose message holds kOutcomeUnknown (a timeout after the request was sent)
//   may have been applied: callers resolve it by reading back what they wrote with it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
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

  // Drops the history up to `revision` (watches from before it are told `compacted`); the keys
  // as they are stay. A revision already compacted is not an error.
  virtual Status Compact(int64_t revision) = 0;

  // Where the store is, for messages ("memory", "http://127.0.0.1:2379").
  virtual std::string Describe() const = 0;
};

// The messages of errors every implementation uses, so callers can tell them apart.
inline constexpr std::string_view kLeaseGone = "lease not found";
inline constexpr std::string_view kOutcomeUnknown = "outcome unknown";
inline bool IsLeaseGone(const Error& e) {
  return e.message().find(kLeaseGone) != std::string::npos;
}
inline bool IsOutcomeUnknown(const Error& e) {
  return e.message().find(kOutcomeUnknown) != std::string::npos;
}

}  // namespace headroom::coord
