#pragma once
// A Store in front of another that counts the requests made through it: what a set of members
// costs the store (fleet-sim's coordination energy, docs/SITE.md "Spare power in fleet-sim").
// Every call is forwarded unchanged (coord/forwarding_store.h); the count is of calls, failed
// ones included, a TxnEach counting each transaction and a Follow its stream's creation.
#include <atomic>
#include <cstdint>

#include "coord/forwarding_store.h"

namespace headroom::coord {

class CountingStore final : public ForwardingStore {
 public:
  explicit CountingStore(Store& inner) : ForwardingStore(&inner) {}

  uint64_t requests() const { return requests_.load(); }

 protected:
  void Begin(StoreCall, size_t n) override { requests_ += n; }

 private:
  std::atomic<uint64_t> requests_{0};
};

}  // namespace headroom::coord
