#include "coord/lease_keeper.h"

#include <chrono>

namespace headroom::coord {

LeaseKeeper::LeaseKeeper(Store& store, LeaseId lease, double period_s)
    : store_(store), lease_(lease), period_s_(period_s), thread_([this] { Loop(); }) {}

LeaseKeeper::~LeaseKeeper() { Stop(); }

void LeaseKeeper::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LeaseKeeper::Loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::duration<double>(period_s_), [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    auto r = store_.LeaseKeepAlive(lease_);
    if (r) {
      ++renewals_;
    } else if (IsLeaseGone(r.error())) {
      lost_ = true;
    }
    lock.lock();
    if (lost_) break;
  }
}

}  // namespace headroom::coord
