#pragma once
// A deadline for a whole blocking operation whose library bounds only each read (httplib's
// read timeout restarts at every byte a slow server trickles): a thread that calls `on_expire`
// once when the deadline passes before the operation ends, so that it can cut the operation
// short (httplib: Client::stop(), which shuts the socket down under the blocked read).
#include <condition_variable>
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

}  // namespace headroom
