#pragma once
// The long-running commands' (agent, coordinator) SIGINT and SIGTERM: blocked in every thread
// (the constructor runs before any other thread starts, and threads inherit the mask) and taken
// by one thread with sigwait. It sets `stop` and wakes SleepUntil, so a loop ends at once,
// however long its period. A repeated signal changes nothing: supervisors send more than one
// (GNU timeout signals the child and then its process group), and the shutdown it would cut
// short is bounded anyway; SIGKILL remains, covered by the agent's guard state file and the
// coordinator's lease TTL.
//
// What runs inside WhileStarting (the coordinator's first answer from etcd, which may take each
// endpoint's timeouts in turn) is not waited for: a signal then ends the process at once.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <string>
#include <thread>

#include "common/log.h"
#include "common/thread_annotations.h"

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
  void SleepUntil(std::chrono::steady_clock::time_point t) EXCLUDES(mu_);
  void Wake() EXCLUDES(mu_);

  // `start()`'s result; a SIGINT or SIGTERM before or while it runs ends the process at once,
  // from the signal thread: one line ("Terminated: stopping while starting (nothing held yet)"),
  // exit status 0, as a stop. REQUIRES: nothing is held yet that a stop must undo (no lease, no
  // power limit set), and `start` does not throw.
  template <typename Start>
  auto WhileStarting(Start&& start) {
    BeginStart();
    auto result = start();
    EndStart();
    return result;
  }

 private:
  void Wait() EXCLUDES(mu_);
  // Ends the process at once when a signal came already.
  void BeginStart() EXCLUDES(mu_);
  void EndStart() EXCLUDES(mu_);
  // One line, then the process ends with status 0; mu_ held, so the start cannot end meanwhile.
  [[noreturn]] void ExitWhileStarting(int signal) REQUIRES(mu_);

  Log log_;
  std::string first_;
  sigset_t set_{};
  std::thread waiter_;
  Mutex mu_;
  std::condition_variable_any cv_;
  bool quitting_ GUARDED_BY(mu_) = false;
  bool woken_ GUARDED_BY(mu_) = false;
  bool starting_ GUARDED_BY(mu_) = false;  // inside WhileStarting
  std::atomic<bool> stop_{false};
};

// Seconds on the steady clock (the commands' injected clock).
double SteadyNowS();
// A time on the steady clock from its seconds (SteadyNowS's).
std::chrono::steady_clock::time_point SteadyTime(double t_s);
// Seconds since the Unix epoch on the wall clock (history and trace stamps).
double UnixNowS();

}  // namespace headroom::cli
