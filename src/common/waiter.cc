#include "common/waiter.h"

#include <chrono>

namespace headroom {
namespace {

class Steady final : public Waiter {
 public:
  double now_s() override {
    return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  }

  bool WaitUntil(std::condition_variable_any& cv, Mutex& mu, double deadline_s,
                 const std::function<bool()>& ready) override REQUIRES(mu) {
    const auto deadline = Clock::time_point(
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(deadline_s)));
    return headroom::WaitUntil(cv, mu, deadline, [&] { return ready(); });
  }

 private:
  using Clock = std::chrono::steady_clock;
};

}  // namespace

Waiter& SteadyWaiter() {
  static Steady steady;
  return steady;
}

}  // namespace headroom
