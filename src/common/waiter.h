#pragma once
// How a thread waits for a condition that another thread makes true, until a deadline: on the
// steady clock (SteadyWaiter(), what the daemons and the CLI use), or on a test's simulated time
// (tests/support/sim_scheduler.h), where a deadline costs no real time and the threads'
// interleaving is the scheduler's, the same on every run.
#include <condition_variable>
#include <functional>

#include "common/thread_annotations.h"

namespace headroom {

class Waiter {
 public:
  virtual ~Waiter() = default;

  // Seconds on this waiter's clock (any origin, never decreasing).
  virtual double now_s() = 0;

  // With `mu` held: waits on `cv` until `ready()` (always called with mu held) or until
  // now_s() >= deadline_s, whichever comes first; returns with mu held and ready()'s last value.
  // Whoever makes ready() true notifies cv.
  // REQUIRES: the caller holds mu.
  virtual bool WaitUntil(std::condition_variable_any& cv, Mutex& mu, double deadline_s,
                         const std::function<bool()>& ready) REQUIRES(mu) = 0;
};

// The steady clock's waiter (thread-safe; lives as long as the process).
Waiter& SteadyWaiter();

}  // namespace headroom
