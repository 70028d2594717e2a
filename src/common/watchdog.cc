#include "common/watchdog.h"

#include <utility>

namespace headroom {

Watchdog::Watchdog(double timeout_s, std::function<void()> on_expire, Waiter& waiter)
    : waiter_(waiter) {
  const double deadline_s = waiter_.now_s() + timeout_s;
  thread_ = std::thread([this, deadline_s, on_expire = std::move(on_expire)] {
    MutexLock lock(mu_);
    if (waiter_.WaitUntil(cv_, mu_, deadline_s, [this]() REQUIRES(mu_) { return done_; })) {
      return;
    }
    expired_ = true;
    // Called with mu_ held: the destructor cannot return while it runs.
    on_expire();
  });
}

Watchdog::~Watchdog() {
  {
    MutexLock lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool Watchdog::expired() const {
  MutexLock lock(mu_);
  return expired_;
}

}  // namespace headroom
