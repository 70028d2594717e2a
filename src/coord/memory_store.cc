#include "coord/memory_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

namespace headroom::coord {

MemoryStore::MemoryStore(std::function<double()> now_s, size_t history_keep)
    : now_s_(std::move(now_s)), history_keep_(history_keep) {}

Status MemoryStore::Check() {
  if (unavailable_) return Error::Io("memory store: unavailable (injected)");
  ExpireLeases();
  return OkStatus();
}

Status MemoryStore::Applied() {
  ++writes_;
  if (fail_next_write_) {
    fail_next_write_ = false;
    return Error::OutcomeUnknown(
        fmt::format("memory store: {} (injected, the write was applied)", kOutcomeUnknown));
  }
  return OkStatus();
}

void MemoryStore::ExpireLeases() {
  const double now = now_s_();
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.expires_s > now) {
      ++it;
      continue;
    }
    // One revision for all the keys of one lease, as etcd deletes them in one transaction.
    const int64_t rev = NextRevision();
    bool any = false;
    for (auto kv = kvs_.begin(); kv != kvs_.end();) {
      if (kv->second.lease != it->first) {
        ++kv;
        continue;
      }
      history_.push_back({WatchEvent::Type::kDelete, {kv->first, {}, 0, rev, 0, 0}});
      kv = kvs_.erase(kv);
      any = true;
    }
    if (any) revision_ = rev;
    it = leases_.erase(it);
  }
  while (history_.size() > history_keep_) {
    compacted_ = history_.front().kv.mod_revision;
    history_.pop_front();
  }
}

void MemoryStore::PutLocked(const std::string& key, const std::string& value, LeaseId lease,
                            int64_t rev) {
  KeyValue& kv = kvs_[key];
  if (kv.create_revision == 0) {
    kv.key = key;
    kv.create_revision = rev;
    kv.version = 0;
  }
  kv.value = value;
  kv.mod_revision = rev;
  ++kv.version;
  kv.lease = lease;
  history_.push_back({WatchEvent::Type::kPut, kv});
}

bool MemoryStore::DeleteLocked(const std::string& key, bool prefix, int64_t rev) {
  bool any = false;
  auto first = kvs_.lower_bound(key);
  auto last = prefix ? kvs_.lower_bound(PrefixEnd(key)) : kvs_.upper_bound(key);
  if (prefix && PrefixEnd(key) == std::string(1, '\0')) last = kvs_.end();
  for (auto it = first; it != last;) {
    history_.push_back({WatchEvent::Type::kDelete, {it->first, {}, 0, rev, 0, 0}});
    it = kvs_.erase(it);
    any = true;
  }
  return any;
}

std::vector<KeyValue> MemoryStore::GetLocked(const std::string& key, bool prefix) const {
  std::vector<KeyValue> out;
  if (!prefix) {
    if (auto it = kvs_.find(key); it != kvs_.end()) out.push_back(it->second);
    return out;
  }
  const std::string end = PrefixEnd(key);
  for (auto it = kvs_.lower_bound(key); it != kvs_.end(); ++it) {
    if (end != std::string(1, '\0') && it->first >= end) break;
    out.push_back(it->second);
  }
  return out;
}

Result<RangeResult> MemoryStore::Get(const std::string& key, bool prefix) {
  MutexLock lock(mu_);
  if (auto st = Check(); !st) return std::move(st).error();
  return RangeResult{GetLocked(key, prefix), revision_};
}

Result<int64_t> MemoryStore::Put(const std::string& key, const std::string& value, LeaseId lease) {
  MutexLock lock(mu_);
  if (auto st = Check(); !st) return std::move(st).error();
  if (lease != 0 && !leases_.contains(lease)) {
    return Error::NotFound(fmt::format("memory store: put {}: {}", key, kLeaseGone));
  }
  revision_ = NextRevision();
  PutLocked(key, value, lease, revision_);
  if (auto st = Applied(); !st) return std::move(st).error();
  return revision_;
}

Result<int64_t> MemoryStore::Delete(const std::string& key, bool prefix) {
  MutexLock lock(mu_);
  if (auto st = Check(); !st) return std::move(st).error();
  if (DeleteLocked(key, prefix, NextRevision())) revision_ = NextRevision();
  if (auto st = Applied(); !st) return std::move(st).error();
  return revision_;
}

bool MemoryStore::Holds(const Compare& c) const {
  const auto it = kvs_.find(c.key);
  const KeyValue* kv = it == kvs_.end() ? nullptr : &it->second;
  int order = 0;  // <0, 0, >0: the key's value against the comparison's
  if (c.target == Compare::Target::kValue) {
    if (kv == nullptr) return false;  // etcd: a missing key fails every value comparison
    order = kv->value.compare(c.value);
  } else {
    int64_t n = 0;
    if (kv != nullptr) {
      switch (c.target) {
        case Compare::Target::kCreateRevision:
          n = kv->create_revision;
          break;
        case Compare::Target::kModRevision:
          n = kv->mod_revision;
          break;
        case Compare::Target::kVersion:
          n = kv->version;
          break;
        case Compare::Target::kLease:
          n = kv->lease;
          break;
        case Compare::Target::kValue:
          break;
      }
    }
    order = n < c.number ? -1 : n > c.number ? 1 : 0;
  }
  switch (c.result) {
    case Compare::Result::kEqual:
      return order == 0;
    case Compare::Result::kNotEqual:
      return order != 0;
    case Compare::Result::kLess:
      return order < 0;
    case Compare::Result::kGreater:
      return order > 0;
  }
  return false;
}

Result<TxnResult> MemoryStore::Txn(const TxnRequest& request) {
  MutexLock lock(mu_);
  if (auto st = Check(); !st) return std::move(st).error();
  if (request.success.size() > kEtcdMaxTxnOps || request.failure.size() > kEtcdMaxTxnOps) {
    return Error::Io("memory store: txn: too many operations in txn request");
  }
  TxnResult out;
  out.succeeded = true;
  for (const Compare& c : request.compare) out.succeeded = out.succeeded && Holds(c);
  const std::vector<Op>& ops = out.succeeded ? request.success : request.failure;
  std::set<std::string> written;
  for (const Op& op : ops) {
    if (op.kind != Op::Kind::kGet && !op.prefix && !written.insert(op.key).second) {
      return Error::Io(
          fmt::format("memory store: txn: duplicate key given in txn request: {}", op.key));
    }
    if (op.kind == Op::Kind::kPut && op.lease != 0 && !leases_.contains(op.lease)) {
      return Error::NotFound(fmt::format("memory store: txn put {}: {}", op.key, kLeaseGone));
    }
  }
  // Every write of one transaction shares one revision; reads see the writes before them.
  const int64_t rev = NextRevision();
  bool wrote = false;
  for (const Op& op : ops) {
    switch (op.kind) {
      case Op::Kind::kPut:
        PutLocked(op.key, op.value, op.lease, rev);
        wrote = true;
        out.responses.emplace_back();
        break;
      case Op::Kind::kDelete:
        wrote = DeleteLocked(op.key, op.prefix, rev) || wrote;
        out.responses.emplace_back();
        break;
      case Op::Kind::kGet:
        out.responses.push_back(GetLocked(op.key, op.prefix));
        break;
    }
  }
  if (wrote) {
    revision_ = rev;
  }
  out.revision = revision_;
  if (wrote) {
    if (auto st = Applied(); !st) return std::move(st).error();
  }
  return out;
}

Result<LeaseId> MemoryStore::LeaseGrant(int64_t ttl_s) {
  MutexLock lock(mu_);
  if (auto st = Check(); !st) return std::move(st).error();
  if (ttl_s < 1) return Error::Io(fmt::format("memory store: lease TTL {} s < 1 s", ttl_s));
  const LeaseId id = next_lease_++;
  leases_[id] = {ttl_s, now_s_() + static_cast<double>(ttl_s)};
  return id;
}

Result<int64_t> MemoryStore::LeaseKeepAlive(LeaseId lease) {
  MutexLock lock(mu_);
  if (auto st = Check(); !st) return std::move(st).error();
  auto it = leases_.find(lease);
  if (it == leases_.end()) {
    return Error::NotFound(fmt::format("memory store: keepalive {:x}: {}", lease, kLeaseGone));
  }
  it->second.expires_s = now_s_() + static_cast<double>(it->second.ttl_s);
  return it->second.ttl_s;
}

Status MemoryStore::LeaseRevoke(LeaseId lease) {
  MutexLock lock(mu_);
  if (auto st = Check(); !st) return std::move(st).error();
  auto it = leases_.find(lease);
  if (it == leases_.end()) {
    return Error::NotFound(fmt::format("memory store: revoke {:x}: {}", lease, kLeaseGone));
  }
  it->second.expires_s = -INFINITY;
  ExpireLeases();
  return OkStatus();
}

Result<WatchResult> MemoryStore::Watch(const std::string& key, bool prefix, int64_t after_revision,
                                       double) {
  MutexLock lock(mu_);
  if (auto st = Check(); !st) return std::move(st).error();
  WatchResult out;
  out.revision = revision_;
  if (after_revision < compacted_) {
    out.compacted = true;
    return out;
  }
  const std::string end = PrefixEnd(key);
  const bool all = prefix && end == std::string(1, '\0');
  // The history is in revision order: the first event after `after_revision` by bisection.
  const auto first = std::upper_bound(
      history_.begin(), history_.end(), after_revision,
      [](int64_t revision, const WatchEvent& e) { return revision < e.kv.mod_revision; });
  for (auto it = first; it != history_.end(); ++it) {
    const WatchEvent& e = *it;
    const std::string& k = e.kv.key;
    const bool match = prefix ? (k >= key && (all || k < end)) : k == key;
    if (match) out.events.push_back(e);
  }
  if (!out.events.empty()) out.revision = out.events.back().kv.mod_revision;
  return out;
}

Status MemoryStore::Compact(int64_t revision) {
  MutexLock lock(mu_);
  if (auto st = Check(); !st) return std::move(st).error();
  if (revision > revision_) {
    return Error::Io(fmt::format("memory store: compact {}: a future revision", revision));
  }
  while (!history_.empty() && history_.front().kv.mod_revision <= revision) history_.pop_front();
  compacted_ = std::max(compacted_, revision);
  return OkStatus();
}

void MemoryStore::SetUnavailable(bool unavailable) {
  MutexLock lock(mu_);
  unavailable_ = unavailable;
}

void MemoryStore::FailNextWriteAfterApply() {
  MutexLock lock(mu_);
  fail_next_write_ = true;
}

void MemoryStore::ExtendLeases(double s) {
  MutexLock lock(mu_);
  for (auto& [id, l] : leases_) l.expires_s += s;
}

void MemoryStore::LoseState() {
  MutexLock lock(mu_);
  kvs_.clear();
  leases_.clear();
  history_.clear();
  revision_ = 1;
  compacted_ = 1;
}

int64_t MemoryStore::revision() const {
  MutexLock lock(mu_);
  return revision_;
}

int64_t MemoryStore::writes() const {
  MutexLock lock(mu_);
  return writes_;
}

}  // namespace headroom::coord
