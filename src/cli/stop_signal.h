#pragma once
// The long-running commands' (agent, coordinator) SIGINT and SIGTERM: blocked in every thread
// (the constructor runs before any other thread starts, and threads inherit the mask) and taken
// by one thread with sigwait. It sets `stop` and wakes SleepUntil, so a loop ends at once,
// however long its period. A repeated signal changes nothing: supervisors send more than one
// (GNU timeout signals the child and then its process group), and the shutdown it would cut
// short is bounded anyway; SIGKILL remains, covered by the agent's guard state file and the
// coordinator's lease TTL.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/log.h"

namespace headroom::cli {

class StopSignal {
 public:
  using Log = Logger;
  // `first` says what the shutdown does first, for the log line ("power limits first").
  StopSignal(Log log, std::string first);
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  const std::atomic<bool>& stop() const { return stop_; }
  // Until `t`, a stop, or a Wake (once for each Wake before or during the sleep).
  void SleepUntil(std::chrono::steady_clock::time_point t);
  void Wake();

 private:
  void Wait();

  Log log_;
  std::string first_;
  sigset_t set_{};
  std::thread waiter_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool quitting_ = false;  // under mu_
  bool woken_ = false;     // under mu_
  std::atomic<bool> stop_{false};
};

// Seconds on the steady clock (the commands' injected clock).
double SteadyNowS();

}  // namespace headroom::cli
