#include "coord/lease_keeper.h"

#include <chrono>

namespace headroom::coord {

namespace {
double SteadyS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

LeaseKeeper::LeaseKeeper(Store& store, LeaseId lease, double period_s)
    : lease_(store, /*ttl_s=*/0, period_s), period_s_(period_s) {
  lease_.Adopt(lease, SteadyS());
  thread_ = std::thread([this] { Loop(); });
}

LeaseKeeper::~LeaseKeeper() { Stop(); }

void LeaseKeeper::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LeaseKeeper::Loop() {
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(period_s_));
  for (;;) {
    {
      MutexLock lock(mu_);
      const auto next = std::chrono::steady_clock::now() + period;
      if (WaitUntil(cv_, mu_, next, [this]() REQUIRES(mu_) { return stop_; })) return;
    }
    if (auto r = lease_.Renew(SteadyS()); r) {
      ++renewals_;
    } else if (IsLeaseGone(r.error())) {
      lost_ = true;
      return;
    }
  }
}

}  // namespace headroom::coord
