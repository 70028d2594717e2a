#include "coord/member_session.h"

#include <chrono>

namespace headroom::coord {

MemberSession::MemberSession(SiteMember& member, Options options)
    : member_(member), options_(std::move(options)) {
  step_thread_ = std::thread([this] { StepLoop(); });
  if (options_.watch) watch_thread_ = std::thread([this] { WatchLoop(); });
}

MemberSession::~MemberSession() { Stop(); }

void MemberSession::Stop() {
  {
    std::lock_guard lock(mu_);
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
    std::unique_lock lock(mu_);
    if (cv_.wait_until(lock, next, [this] { return done_; })) return;
  }
}

void MemberSession::WatchLoop() {
  for (;;) {
    const Status followed = member_.WatchGrant(options_.quiet_s);
    std::unique_lock lock(mu_);
    if (done_) return;
    if (!followed && cv_.wait_for(lock, std::chrono::milliseconds(250), [this] { return done_; })) {
      return;
    }
  }
}

}  // namespace headroom::coord
