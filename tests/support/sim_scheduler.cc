#include "support/sim_scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace headroom::testing {
namespace {

// The participant this thread is, when it is one.
thread_local const SimScheduler* tls_scheduler = nullptr;
thread_local int tls_index = -1;

const char* StateName(int state) {
  switch (state) {
    case 0:
      return "runnable";
    case 1:
      return "sleeping";
    case 2:
      return "waiting";
    default:
      return "done";
  }
}

}  // namespace

SimScheduler::SimScheduler(double start_s) : now_s_(start_s) {}

SimScheduler::~SimScheduler() {
  for (auto& p : parts_) {
    if (p.thread.joinable()) p.thread.join();
  }
}

void SimScheduler::Spawn(std::string name, std::function<void()> fn) {
  std::lock_guard lock(mu_);
  for (const auto& p : parts_) {
    if (p.name == name) {
      std::fprintf(stderr, "SimScheduler: a second participant named %s\n", name.c_str());
      std::abort();
    }
  }
  parts_.emplace_back();
  Participant& p = parts_.back();
  p.name = std::move(name);
  p.fn = std::move(fn);
  const int index = static_cast<int>(parts_.size()) - 1;
  p.thread = std::thread([this, index] { Body(index); });
}

void SimScheduler::Body(int index) {
  tls_scheduler = this;
  tls_index = index;
  std::function<void()> fn;
  bool killed = false;
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return current_ == index; });
    fn = std::move(parts_[static_cast<size_t>(index)].fn);
    killed = parts_[static_cast<size_t>(index)].killed;
  }
  if (!killed) {
    try {
      fn();
    } catch (const Killed&) {
    }
  }
  std::lock_guard lock(mu_);
  parts_[static_cast<size_t>(index)].state = State::kDone;
  ++epoch_;
  ScheduleLocked();
}

Status SimScheduler::Run(double max_s) {
  std::unique_lock lock(mu_);
  assert(!running_);
  running_ = true;
  max_s_ = max_s;
  current_ = -1;
  ScheduleLocked();
  cv_.wait(lock, [&] { return current_ == -1; });
  running_ = false;
  if (!failure_.empty()) {
    // Whoever is still blocked stays so: kill them all and let them unwind, so that the
    // destructor can join them.
    std::string failure = failure_;
    for (auto& p : parts_) p.killed = true;
    failure_.clear();
    max_s_ = std::numeric_limits<double>::infinity();
    for (auto& p : parts_) {
      if (p.state != State::kDone) {
        p.state = State::kRunnable;
        p.stopped_until_s = -1e300;
      }
    }
    ScheduleLocked();
    cv_.wait(lock, [&] { return current_ == -1; });
    return Error::Io(failure);
  }
  return OkStatus();
}

double SimScheduler::now_s() const {
  std::lock_guard lock(mu_);
  return now_s_;
}

int SimScheduler::Self() const {
  assert(tls_scheduler == this && tls_index >= 0);
  return tls_index;
}

void SimScheduler::Sleep(double s) {
  const double until = now_s() + std::max(0.0, s);
  if (Block(s > 0 ? State::kSleeping : State::kRunnable, until, true)) throw Killed{};
}

bool SimScheduler::Block(State state, double wake_s, bool progress) {
  const int me = Self();
  std::unique_lock lock(mu_);
  assert(current_ == me);
  Participant& p = parts_[static_cast<size_t>(me)];
  if (p.killed) return true;
  if (progress) ++epoch_;
  p.state = state;
  p.wake_s = wake_s;
  p.checked_epoch = epoch_;
  ScheduleLocked();
  cv_.wait(lock, [&] { return current_ == me; });
  return p.killed;
}

void SimScheduler::ScheduleLocked() {
  const int n = static_cast<int>(parts_.size());
  ++switches_;
  while (true) {
    if (!failure_.empty()) {
      current_ = -1;
      break;
    }
    const auto can_run = [&](const Participant& p) { return p.stopped_until_s <= now_s_; };
    int next = -1;
    // Round robin from the one after the current holder: whoever can go on.
    for (int k = 1; k <= n && next < 0; ++k) {
      const int i = ((current_ < 0 ? -1 : current_) + k) % n;
      const Participant& p = parts_[static_cast<size_t>(i)];
      if (!can_run(p)) continue;
      if (p.state == State::kRunnable) next = i;
    }
    // Then a waiter that has not checked its condition since the last progress.
    for (int k = 1; k <= n && next < 0; ++k) {
      const int i = ((current_ < 0 ? -1 : current_) + k) % n;
      Participant& p = parts_[static_cast<size_t>(i)];
      if (!can_run(p) || p.state != State::kWaiting) continue;
      if (p.checked_epoch < epoch_) next = i;
    }
    if (next >= 0) {
      Participant& p = parts_[static_cast<size_t>(next)];
      p.state = State::kRunnable;  // it runs; it says how it blocks next
      current_ = next;
      break;
    }
    // Nobody can go on now: the clock jumps to the earliest wake-up.
    double t = std::numeric_limits<double>::infinity();
    bool alive = false;
    for (const auto& p : parts_) {
      if (p.state == State::kDone) continue;
      alive = true;
      double w = std::numeric_limits<double>::infinity();
      if (p.state == State::kSleeping || p.state == State::kWaiting) w = p.wake_s;
      if (p.state == State::kRunnable) w = now_s_;  // runnable once not stopped
      t = std::min(t, std::max(w, p.stopped_until_s));
    }
    if (!alive) {
      current_ = -1;
      break;
    }
    if (!std::isfinite(t)) {
      failure_ = fmt::format("deadlock at t = {:.3f} s: {}", now_s_, DescribeLocked());
      continue;
    }
    if (t > max_s_) {
      failure_ = fmt::format("the simulation would pass {:.3f} s (now {:.3f} s): {}", max_s_,
                             now_s_, DescribeLocked());
      continue;
    }
    now_s_ = std::max(now_s_, t);
    for (auto& p : parts_) {
      if (!can_run(p)) continue;
      if ((p.state == State::kSleeping || p.state == State::kWaiting) && p.wake_s <= now_s_) {
        p.state = State::kRunnable;
      }
    }
  }
  cv_.notify_all();
}

bool SimScheduler::SimWaiter::WaitUntil(std::condition_variable_any& /*cv*/, Mutex& mu,
                                        double deadline_s, const std::function<bool()>& ready) {
  bool progress = true;
  while (true) {
    if (ready()) return true;
    if (s_.now_s() >= deadline_s) return false;
    mu.unlock();
    const bool killed = s_.Block(State::kWaiting, deadline_s, progress);
    mu.lock();
    if (killed) throw Killed{};
    progress = false;
  }
}

void SimScheduler::Kill(const std::string& name) {
  std::lock_guard lock(mu_);
  for (auto& p : parts_) {
    if (p.name != name || p.state == State::kDone) continue;
    p.killed = true;
    p.state = State::kRunnable;  // scheduled at once, to unwind
    p.stopped_until_s = -1e300;
  }
}

void SimScheduler::Stop(const std::string& name, double s) {
  std::lock_guard lock(mu_);
  for (auto& p : parts_) {
    if (p.name == name) p.stopped_until_s = now_s_ + s;
  }
}

bool SimScheduler::Ended(const std::string& name) const {
  std::lock_guard lock(mu_);
  for (const auto& p : parts_) {
    if (p.name == name) return p.state == State::kDone;
  }
  return false;
}

long SimScheduler::switches() const {
  std::lock_guard lock(mu_);
  return switches_;
}

std::string SimScheduler::DescribeLocked() const {
  std::string out;
  for (const auto& p : parts_) {
    if (p.state == State::kDone) continue;
    if (!out.empty()) out += "; ";
    out += fmt::format("{} {}", p.name, StateName(static_cast<int>(p.state)));
    if (p.state == State::kSleeping || p.state == State::kWaiting) {
      out += std::isfinite(p.wake_s) ? fmt::format(" until {:.3f} s", p.wake_s) : " forever";
    }
    if (p.stopped_until_s > now_s_)
      out += fmt::format(", stopped until {:.3f} s", p.stopped_until_s);
  }
  return out;
}

}  // namespace headroom::testing
