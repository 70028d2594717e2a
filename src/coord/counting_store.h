#pragma once
// A Store in front of another that counts the requests made through it: what a set of members
// costs the store (fleet-sim's coordination energy, docs/FLEET.md "Spare power in fleet-sim").
// Every call is forwarded unchanged; the count is of calls, failed ones included.
#include <atomic>
#include <cstdint>

#include "coord/store.h"

namespace headroom::coord {

class CountingStore final : public Store {
 public:
  explicit CountingStore(Store& inner) : inner_(inner) {}

  uint64_t requests() const { return requests_.load(); }

  Result<RangeResult> Get(const std::string& key, bool prefix = false) override {
    ++requests_;
    return inner_.Get(key, prefix);
  }
  Result<int64_t> Put(const std::string& key, const std::string& value,
                      LeaseId lease = 0) override {
    ++requests_;
    return inner_.Put(key, value, lease);
  }
  Result<int64_t> Delete(const std::string& key, bool prefix = false) override {
    ++requests_;
    return inner_.Delete(key, prefix);
  }
  Result<TxnResult> Txn(const TxnRequest& request) override {
    ++requests_;
    return inner_.Txn(request);
  }
  std::vector<Result<TxnResult>> TxnEach(const std::vector<TxnRequest>& requests) override {
    requests_ += requests.size();
    return inner_.TxnEach(requests);
  }
  Result<LeaseId> LeaseGrant(int64_t ttl_s) override {
    ++requests_;
    return inner_.LeaseGrant(ttl_s);
  }
  Result<int64_t> LeaseKeepAlive(LeaseId lease) override {
    ++requests_;
    return inner_.LeaseKeepAlive(lease);
  }
  Status LeaseRevoke(LeaseId lease) override {
    ++requests_;
    return inner_.LeaseRevoke(lease);
  }
  Result<WatchResult> Watch(const std::string& key, bool prefix, int64_t after_revision,
                            double wait_s) override {
    ++requests_;
    return inner_.Watch(key, prefix, after_revision, wait_s);
  }
  // One request: the stream's creation.
  Result<int64_t> Follow(const std::string& key, bool prefix, int64_t after_revision,
                         double quiet_s,
                         const std::function<bool(const WatchResult&)>& on_change) override {
    ++requests_;
    return inner_.Follow(key, prefix, after_revision, quiet_s, on_change);
  }
  void CancelFollows() override { inner_.CancelFollows(); }
  Status Compact(int64_t revision) override {
    ++requests_;
    return inner_.Compact(revision);
  }
  std::string Describe() const override { return inner_.Describe(); }

 private:
  Store& inner_;
  std::atomic<uint64_t> requests_{0};
};

}  // namespace headroom::coord
