// Clang's thread-safety analysis (-Wthread-safety, the `thread-safety` preset: `make test` builds
// the agent with it and -Werror), and the annotated mutex it needs: libstdc++'s std::mutex
// carries no annotations. Elsewhere (g++) the macros are empty and Mutex is a std::mutex.
#pragma once

#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define HEADROOM_TSA(x) __attribute__((x))
#else
#define HEADROOM_TSA(x)
#endif

#define CAPABILITY(x) HEADROOM_TSA(capability(x))
#define SCOPED_CAPABILITY HEADROOM_TSA(scoped_lockable)
#define GUARDED_BY(x) HEADROOM_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) HEADROOM_TSA(pt_guarded_by(x))
#define REQUIRES(...) HEADROOM_TSA(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) HEADROOM_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE(...) HEADROOM_TSA(release_capability(__VA_ARGS__))
#define EXCLUDES(...) HEADROOM_TSA(locks_excluded(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS HEADROOM_TSA(no_thread_safety_analysis)

namespace headroom {

class CAPABILITY("mutex") Mutex {
 public:
  void lock() ACQUIRE() { m_.lock(); }
  void unlock() RELEASE() { m_.unlock(); }
  // For condition variables only (std::condition_variable_any waits on the Mutex itself).

 private:
  std::mutex m_;
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& m) ACQUIRE(m) : m_(m) { m_.lock(); }
  ~MutexLock() RELEASE() { m_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& m_;
};

// Waits on `cv` with `mu` held (as std::condition_variable_any::wait_until does: released while
// waiting, held again on return). REQUIRES: the caller holds mu (a MutexLock).
template <class Clock, class Duration, class Predicate>
bool WaitUntil(std::condition_variable_any& cv, Mutex& mu,
               const std::chrono::time_point<Clock, Duration>& t, Predicate stop) REQUIRES(mu) {
  return cv.wait_until(mu, t, stop);
}
// The same, without a deadline.
template <class Predicate>
void Wait(std::condition_variable_any& cv, Mutex& mu, Predicate stop) REQUIRES(mu) {
  cv.wait(mu, stop);
}

}  // namespace headroom
