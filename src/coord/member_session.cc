#include "coord/member_session.h"

#include <chrono>

namespace headroom::coord {

namespace {
constexpr std::chrono::milliseconds kWatchRetry{250};  // after a watch that failed
}  // namespace

MemberSession::MemberSession(SiteMember& member, Options options)
    : member_(member), options_(std::move(options)) {
  step_thread_ = std::thread([this] { StepLoop(); });
  if (options_.watch) watch_thread_ = std::thread([this] { WatchLoop(); });
}

MemberSession::~MemberSession() { Stop(); }

void MemberSession::Stop() {
  {
    MutexLock lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  if (watch_thread_.joinable()) {
    member_.StopWatching();
    watch_thread_.join();
  }
  if (step_thread_.joinable()) step_thread_.join();
}

void MemberSession::StepLoop() {
  auto next = std::chrono::steady_clock::now();
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(options_.step_s));
  for (;;) {
    if (options_.before_step) options_.before_step();
    member_.Step();
    next += period;
    MutexLock lock(mu_);
    if (WaitUntil(cv_, mu_, next, [this]() REQUIRES(mu_) { return done_; })) return;
  }
}

void MemberSession::WatchLoop() {
  for (;;) {
    const Status followed = member_.WatchGrant(options_.quiet_s);
    MutexLock lock(mu_);
    if (done_) return;
    const auto retry = std::chrono::steady_clock::now() + kWatchRetry;
    if (!followed && WaitUntil(cv_, mu_, retry, [this]() REQUIRES(mu_) { return done_; })) return;
  }
}

}  // namespace headroom::coord
