#pragma once
// Simulated time for threads that block: a deterministic scheduler for tests of distributed
// code in one process (DiLoCo's workers over a MemoryStore and a LocalGroup, tests/diloco/).
//
// Participants are threads started with Spawn. Exactly one of them runs at a time: it holds the
// baton until it blocks (Sleep, or a wait through waiter()), and the scheduler hands the baton
// to the next participant that can go on, in spawn order after the one that blocked. Time
// stands still while anyone can run; when every participant is blocked, the clock jumps to the
// earliest wake-up (a sleep's end, a wait's deadline, a stop's end). So a test of timeouts,
// leases and deadlines of seconds runs in milliseconds, and every run interleaves the threads
// the same way: what a test observes is a function of its code and seeds, never of the
// machine's load.
//
// A participant waiting on a condition (waiter().WaitUntil) is woken to check it again after
// any other participant has run (the scheduler cannot see conditions, only progress): a wait
// costs a check per step of the others, not a busy loop.
//
// Faults, as a test of processes injects them:
// - Kill(name): the participant's next scheduling point (a sleep or a wait) throws Killed, which
//   unwinds its thread: it stops as at SIGKILL, renewing no lease and answering no peer.
// - Stop(name, s): it is not scheduled for s seconds of simulated time (SIGSTOP, then SIGCONT).
//
// Run() drives the simulation from the test's own thread (not a participant) until every
// participant has returned. It fails, naming the participants and what each is blocked in, when
// none can ever run again (a deadlock: every one waits without a deadline) or when the clock
// would pass max_s.
//
// Thread-safe: Spawn before Run or from a participant; Kill, Stop, now_s, Sleep and waiter()
// from participants (Sleep and waits only from a participant's own thread).
#include <condition_variable>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/waiter.h"

namespace headroom::testing {

// Thrown into a killed participant's thread at its next scheduling point; Spawn's wrapper
// catches it. Code under test must let it pass (no catch (...) that swallows it).
struct Killed {};

class SimScheduler {
 public:
  explicit SimScheduler(double start_s = 0.0);
  ~SimScheduler();  // joins every thread (REQUIRES: Run has returned, or nothing was spawned)
  SimScheduler(const SimScheduler&) = delete;
  SimScheduler& operator=(const SimScheduler&) = delete;

  // A participant named `name` (unique) that runs fn when first scheduled.
  void Spawn(std::string name, std::function<void()> fn);

  // Runs until every participant has returned; an error on a deadlock or past max_s.
  Status Run(double max_s);

  double now_s() const;
  // REQUIRES: called from a participant. s <= 0 yields the baton (to whoever can run) and
  // returns at the same time.
  void Sleep(double s);
  Waiter& waiter() { return waiter_; }

  void Kill(const std::string& name);
  void Stop(const std::string& name, double s);
  // Whether the participant has returned or was killed.
  bool Ended(const std::string& name) const;

  // Hand-offs so far (a measure of the work a test did).
  long switches() const;

 private:
  enum class State { kRunnable, kSleeping, kWaiting, kDone };
  struct Participant {
    std::string name;
    std::function<void()> fn;
    State state = State::kRunnable;
    double wake_s = 0;                // kSleeping: the end; kWaiting: the deadline
    double stopped_until_s = -1e300;  // Stop
    long checked_epoch = -1;          // kWaiting: the progress it last checked against
    bool killed = false;
    std::thread thread;
  };
  class SimWaiter final : public Waiter {
   public:
    explicit SimWaiter(SimScheduler& s) : s_(s) {}
    double now_s() override { return s_.now_s(); }
    bool WaitUntil(std::condition_variable_any& cv, Mutex& mu, double deadline_s,
                   const std::function<bool()>& ready) override REQUIRES(mu);

   private:
    SimScheduler& s_;
  };

  // Blocks the calling participant (the baton's holder) in `state` until `wake_s`; `progress`:
  // it ran code since it last blocked (others' conditions may have changed). Returns whether
  // it was killed meanwhile.
  bool Block(State state, double wake_s, bool progress);
  // With mu_ held: chooses who runs next (or the driver, when everything has ended or cannot).
  void ScheduleLocked();
  int Self() const;  // the calling thread's participant (REQUIRES: one)
  void Body(int index);
  std::string DescribeLocked() const;

  SimWaiter waiter_{*this};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Participant> parts_;  // guarded by mu_ (the threads: joined by the destructor)
  int current_ = -1;               // the baton's holder; -1: the driver
  double now_s_;
  long epoch_ = 0;  // progress: a participant that ran and blocked again
  long switches_ = 0;
  double max_s_ = std::numeric_limits<double>::infinity();
  std::string failure_;
  bool running_ = false;
};

}  // namespace headroom::testing
