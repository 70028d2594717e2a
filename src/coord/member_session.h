// A member's store work on threads of its own -- etcd's Session: its lease kept alive until
// stopped. The one member thread of the agent (agent/daemon.h) and of a DiLoCo worker at a site
// (diloco_site/site_power.h): SiteMember::Step every step_s (after `before_step`, when given),
// and, with a watch, the grant's watch on a second thread (SiteMember::WatchGrant for quiet_s at
// a time; again 250 ms after a failure). Stop ends both at once, whatever they wait on (the
// member's StopWatching), and joins them; leaving (SiteMember::Leave) is the caller's, after
// whatever must come first (an agent restores its power limits before it leaves).
#pragma once

#include <condition_variable>
#include <functional>
#include <thread>

#include "common/thread_annotations.h"
#include "coord/member.h"

namespace headroom::coord {

class MemberSession {
 public:
  struct Options {
    double step_s = 0.25;
    bool watch = false;                 // the grant's watch on a second thread
    double quiet_s = 30.0;              // a watch with nothing on it this long is made again
    std::function<void()> before_step;  // on the step thread, before each Step
  };
  // Starts the threads. `member` outlives the session.
  MemberSession(SiteMember& member, Options options);
  ~MemberSession();  // Stop
  MemberSession(const MemberSession&) = delete;
  MemberSession& operator=(const MemberSession&) = delete;

  // Ends the threads and joins them (at once: a wait for the next step or a watch in progress
  // ends). Idempotent.
  void Stop() EXCLUDES(mu_);

 private:
  void StepLoop() EXCLUDES(mu_);
  void WatchLoop() EXCLUDES(mu_);

  SiteMember& member_;
  const Options options_;
  Mutex mu_;
  std::condition_variable_any cv_;
  bool done_ GUARDED_BY(mu_) = false;
  std::thread step_thread_;
  std::thread watch_thread_;
};

}  // namespace headroom::coord
