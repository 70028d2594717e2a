#include "cli/stop_signal.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace headroom::cli {

StopSignal::StopSignal(Log log, std::string first)
    : log_(std::move(log)), first_(std::move(first)) {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGUSR1);  // our own: the waiter's end
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  waiter_ = std::thread([this] { Wait(); });
}

StopSignal::~StopSignal() {
  {
    MutexLock lock(mu_);
    quitting_ = true;
  }
  pthread_kill(waiter_.native_handle(), SIGUSR1);
  waiter_.join();
}

void StopSignal::BeginStart() {
  MutexLock lock(mu_);
  if (stop_.load()) {  // its line is said: stopping
    std::fflush(nullptr);
    std::_Exit(EXIT_SUCCESS);
  }
  starting_ = true;
}

void StopSignal::EndStart() {
  MutexLock lock(mu_);
  starting_ = false;
}

void StopSignal::ExitWhileStarting(int signal) {
  // The start cannot end meanwhile (mu_ is held). Nothing is held, so nothing is undone.
  log_(fmt::format("{}: stopping while starting (nothing held yet)", strsignal(signal)));
  std::fflush(nullptr);
  std::_Exit(EXIT_SUCCESS);
}

void StopSignal::SleepUntil(std::chrono::steady_clock::time_point t) {
  MutexLock lock(mu_);
  WaitUntil(cv_, mu_, t, [this]() REQUIRES(mu_) { return stop_.load() || woken_; });
  woken_ = false;
}

void StopSignal::Wake() {
  {
    MutexLock lock(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

void StopSignal::Wait() {
  for (;;) {
    int signal = 0;
    if (sigwait(&set_, &signal) != 0) continue;
    {
      MutexLock lock(mu_);
      if (signal == SIGUSR1) {
        if (quitting_) return;
        continue;
      }
      if (stop_.load()) continue;  // already stopping
      if (starting_) ExitWhileStarting(signal);
      stop_.store(true);
    }
    cv_.notify_all();
    log_(fmt::format("{}: stopping ({})", strsignal(signal), first_));
  }
}

double SteadyNowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::chrono::steady_clock::time_point SteadyTime(double t_s) {
  return std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(t_s)));
}

double UnixNowS() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace headroom::cli
