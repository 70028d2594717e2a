#include "common/stats.h"

#include <gtest/gtest.h>

#include <vector>

namespace headroom {
namespace {

// Expected values by hand with h = (n - 1) q (numpy.quantile's default, "linear").
TEST(Quantile, InterpolatesBetweenOrderStatistics) {
  std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(Quantile(v, 0.5), 2.5);    // h = 1.5
  EXPECT_DOUBLE_EQ(Quantile(v, 0.95), 3.85);  // h = 2.85 -> 3 + 0.85
  EXPECT_DOUBLE_EQ(Quantile(v, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(Quantile(v, 1.0), 4.0);
  std::vector<double> one = {7};
  EXPECT_DOUBLE_EQ(Quantile(one, 0.99), 7.0);
}

TEST(Median, OddAndEvenCounts) {
  std::vector<double> odd = {3, 1, 2};
  EXPECT_DOUBLE_EQ(Median(odd), 2.0);
  std::vector<double> even = {10, 1, 2, 1};
  EXPECT_DOUBLE_EQ(Median(even), 1.5);
}

}  // namespace
}  // namespace headroom
