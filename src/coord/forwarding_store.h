#pragma once
// A Store that forwards every call to another (LevelDB's EnvWrapper): the one forwarder under
// the stores that stand in front of another -- counting its requests (CountingStore), opening
// it on first use (LazyStore), timing its calls (bench/fleet_scale's RecordingStore). A subclass
// overrides what it needs: Target() to choose (or open) the store called, Begin and End to see
// each call. Every call passes Begin, then the target's call, then End with whether it succeeded
// (a call whose target cannot be had ends with false, unsent). CancelFollows and Describe pass
// neither.
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "coord/store.h"

namespace headroom::coord {

enum class StoreCall {
  kGet,
  kPut,
  kDelete,
  kTxn,
  kTxnEach,
  kLeaseGrant,
  kLeaseKeepAlive,
  kLeaseRevoke,
  kWatch,
  kFollow,
  kCompact
};

class ForwardingStore : public Store {
 public:
  // `target` may be null when Target() is overridden.
  explicit ForwardingStore(Store* target) : target_(target) {}

  Result<RangeResult> Get(const std::string& key, bool prefix = false) override {
    return Forward(StoreCall::kGet, 1, [&](Store& s) { return s.Get(key, prefix); });
  }
  Result<int64_t> Put(const std::string& key, const std::string& value,
                      LeaseId lease = 0) override {
    return Forward(StoreCall::kPut, 1, [&](Store& s) { return s.Put(key, value, lease); });
  }
  Result<int64_t> Delete(const std::string& key, bool prefix = false) override {
    return Forward(StoreCall::kDelete, 1, [&](Store& s) { return s.Delete(key, prefix); });
  }
  Result<TxnResult> Txn(const TxnRequest& request) override {
    return Forward(StoreCall::kTxn, 1, [&](Store& s) { return s.Txn(request); });
  }
  std::vector<Result<TxnResult>> TxnEach(const std::vector<TxnRequest>& requests) override {
    Begin(StoreCall::kTxnEach, requests.size());
    auto t = Target();
    if (!t) {
      End(StoreCall::kTxnEach, false);
      return std::vector<Result<TxnResult>>(requests.size(), t.error());
    }
    auto out = (*t)->TxnEach(requests);
    bool ok = true;
    for (const auto& r : out) ok = ok && r.ok();
    End(StoreCall::kTxnEach, ok);
    return out;
  }
  Result<LeaseId> LeaseGrant(int64_t ttl_s) override {
    return Forward(StoreCall::kLeaseGrant, 1, [&](Store& s) { return s.LeaseGrant(ttl_s); });
  }
  Result<int64_t> LeaseKeepAlive(LeaseId lease) override {
    return Forward(StoreCall::kLeaseKeepAlive, 1,
                   [&](Store& s) { return s.LeaseKeepAlive(lease); });
  }
  Status LeaseRevoke(LeaseId lease) override {
    return Forward(StoreCall::kLeaseRevoke, 1, [&](Store& s) { return s.LeaseRevoke(lease); });
  }
  Result<WatchResult> Watch(const std::string& key, bool prefix, int64_t after_revision,
                            double wait_s) override {
    return Forward(StoreCall::kWatch, 1,
                   [&](Store& s) { return s.Watch(key, prefix, after_revision, wait_s); });
  }
  Result<int64_t> Follow(const std::string& key, bool prefix, int64_t after_revision,
                         double quiet_s,
                         const std::function<bool(const WatchResult&)>& on_change) override {
    return Forward(StoreCall::kFollow, 1, [&](Store& s) {
      return s.Follow(key, prefix, after_revision, quiet_s, on_change);
    });
  }
  bool WatchWaits() const override { return target_ != nullptr && target_->WatchWaits(); }
  void CancelFollows() override {
    if (target_ != nullptr) target_->CancelFollows();
  }
  Status Compact(int64_t revision) override {
    return Forward(StoreCall::kCompact, 1, [&](Store& s) { return s.Compact(revision); });
  }
  std::string Describe() const override {
    return target_ != nullptr ? target_->Describe() : std::string("(none)");
  }

 protected:
  // The store each call goes to; the one given by default.
  virtual Result<Store*> Target() { return target_; }
  // Before each call: `n` requests (a TxnEach's count, else 1). Any thread.
  virtual void Begin(StoreCall /*call*/, size_t /*n*/) {}
  // After it, with whether it succeeded.
  virtual void End(StoreCall /*call*/, bool /*ok*/) {}

 private:
  template <class F>
  auto Forward(StoreCall call, size_t n, F&& f) -> decltype(f(std::declval<Store&>())) {
    Begin(call, n);
    auto t = Target();
    if (!t) {
      End(call, false);
      return std::move(t).error();
    }
    auto r = f(**t);
    End(call, r.ok());
    return r;
  }

  Store* const target_;
};

}  // namespace headroom::coord
