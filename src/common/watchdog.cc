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

RearmableWatchdog::RearmableWatchdog(Waiter& waiter) : waiter_(waiter) {
  thread_ = std::thread([this] { Run(); });
}

RearmableWatchdog::~RearmableWatchdog() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void RearmableWatchdog::Arm(double timeout_s, std::function<void()> on_expire) {
  {
    MutexLock lock(mu_);
    armed_ = true;
    expired_ = false;
    ++generation_;
    deadline_s_ = waiter_.now_s() + timeout_s;
    on_expire_ = std::move(on_expire);
  }
  cv_.notify_all();
}

bool RearmableWatchdog::Disarm() {
  bool expired = false;
  {
    MutexLock lock(mu_);
    armed_ = false;
    expired = expired_;
    on_expire_ = nullptr;
  }
  cv_.notify_all();
  return expired;
}

void RearmableWatchdog::Run() {
  MutexLock lock(mu_);
  while (!stop_) {
    if (!armed_) {
      // Idle: wait to be armed (an hour at a time: the waiter's deadline is finite).
      waiter_.WaitUntil(cv_, mu_, waiter_.now_s() + 3600.0,
                        [this]() REQUIRES(mu_) { return armed_ || stop_; });
      continue;
    }
    const double deadline_s = deadline_s_;
    const uint64_t generation = generation_;
    waiter_.WaitUntil(cv_, mu_, deadline_s, [this, generation]() REQUIRES(mu_) {
      return !armed_ || stop_ || generation_ != generation;
    });
    if (stop_ || !armed_ || generation_ != generation) continue;  // disarmed or re-armed
    if (waiter_.now_s() < deadline_s) continue;                   // woken early
    // Called with mu_ held: Disarm() cannot return while it runs.
    expired_ = true;
    armed_ = false;
    if (on_expire_) on_expire_();
  }
}

}  // namespace headroom
