#pragma once
// A deadline for a whole blocking operation whose library bounds only each read (httplib's
// read timeout restarts at every byte a slow server trickles): a thread that calls `on_expire`
// once when the deadline passes before the operation ends, so that it can cut the operation
// short (httplib: Client::stop(), which shuts the socket down under the blocked read).
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <thread>

#include "common/thread_annotations.h"
#include "common/waiter.h"

namespace headroom {

class Watchdog {
 public:
  // Arms a deadline `timeout_s` from now on `waiter`'s clock.
  Watchdog(double timeout_s, std::function<void()> on_expire, Waiter& waiter = SteadyWaiter());
  // Disarms: once it returns, `on_expire` is not running and will never be called.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Whether `on_expire` was called (the operation was cut short by the deadline).
  bool expired() const;

 private:
  Waiter& waiter_;
  mutable Mutex mu_;
  std::condition_variable_any cv_;
  bool done_ GUARDED_BY(mu_) = false;
  bool expired_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The same for a sequence of operations on one thread of its own (one per connection, say):
// each operation arms it and disarms it, without starting a thread each time.
class RearmableWatchdog {
 public:
  explicit RearmableWatchdog(Waiter& waiter = SteadyWaiter());
  ~RearmableWatchdog();
  RearmableWatchdog(const RearmableWatchdog&) = delete;
  RearmableWatchdog& operator=(const RearmableWatchdog&) = delete;

  // Calls `on_expire` once if Disarm() does not come within `timeout_s`. REQUIRES: disarmed.
  void Arm(double timeout_s, std::function<void()> on_expire);
  // Whether `on_expire` was called since Arm(). Once it returns, `on_expire` is not running and
  // will not be called.
  bool Disarm();

 private:
  void Run();

  Waiter& waiter_;
  Mutex mu_;
  std::condition_variable_any cv_;
  bool armed_ GUARDED_BY(mu_) = false;
  bool expired_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  double deadline_s_ GUARDED_BY(mu_) = 0.0;
  uint64_t generation_ GUARDED_BY(mu_) = 0;  // of Arm() calls
  std::function<void()> on_expire_ GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace headroom
