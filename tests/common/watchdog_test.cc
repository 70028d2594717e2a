#include "common/watchdog.h"

#include <gtest/gtest.h>

#include <future>

namespace headroom {
namespace {

TEST(Watchdog, DisarmedBeforeItsDeadlineItNeverFires) {
  bool fired = false;  // would be written by the watchdog's thread; read after its join
  {
    const Watchdog dog(3600.0, [&] { fired = true; });
    EXPECT_FALSE(dog.expired());
  }  // returns at once: the destructor wakes the thread rather than waiting out the hour
  EXPECT_FALSE(fired);
}

TEST(Watchdog, PastItsDeadlineItFiresOnceAndSaysSo) {
  std::promise<void> fired;
  int calls = 0;
  {
    const Watchdog dog(0.0, [&] {
      ++calls;
      fired.set_value();
    });
    fired.get_future().wait();
    EXPECT_TRUE(dog.expired());
  }
  EXPECT_EQ(calls, 1);
}

TEST(RearmableWatchdog, EachArmingIsItsOwnDeadline) {
  RearmableWatchdog dog;
  int calls = 0;  // written by the watchdog's thread under its lock; read after Disarm
  for (int i = 0; i < 100; ++i) {
    dog.Arm(3600.0, [&] { ++calls; });
    EXPECT_FALSE(dog.Disarm());
  }
  EXPECT_EQ(calls, 0);
  std::promise<void> fired;
  dog.Arm(0.0, [&] {
    ++calls;
    fired.set_value();
  });
  fired.get_future().wait();
  EXPECT_TRUE(dog.Disarm());
  EXPECT_EQ(calls, 1);
  dog.Arm(3600.0, [&] { ++calls; });  // after an expiry it arms again
  EXPECT_FALSE(dog.Disarm());
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace headroom
