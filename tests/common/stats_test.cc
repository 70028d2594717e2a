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

// The smallest value with at least q of the values at or below it: rank max(1, ceil(q n)).
TEST(QuantileNearestRank, TakesAValueNeverInterpolates) {
  std::vector<double> v = {3, 1, 2, 4};
  EXPECT_EQ(QuantileNearestRank(v, 0.5), 2.0);   // rank 2
  EXPECT_EQ(QuantileNearestRank(v, 0.51), 3.0);  // rank ceil(2.04) = 3
  EXPECT_EQ(QuantileNearestRank(v, 0.99), 4.0);  // rank 4
  EXPECT_EQ(QuantileNearestRank(v, 0.0), 1.0);   // rank 1, not 0
  EXPECT_EQ(QuantileNearestRank(v, 1.0), 4.0);
  std::vector<double> hundred;
  for (int i = 100; i >= 1; --i) hundred.push_back(i);
  EXPECT_EQ(QuantileNearestRank(hundred, 0.99), 99.0);  // the 99th smallest
  std::vector<double> one = {7};
  EXPECT_EQ(QuantileNearestRank(one, 0.5), 7.0);
  // Where the two definitions differ: type 7 interpolates 2.5, nearest rank takes 2.
  std::vector<double> w = {3, 1, 2, 4};
  EXPECT_DOUBLE_EQ(Quantile(w, 0.5), 2.5);
}

TEST(Median, OddAndEvenCounts) {
  std::vector<double> odd = {3, 1, 2};
  EXPECT_DOUBLE_EQ(Median(odd), 2.0);
  std::vector<double> even = {10, 1, 2, 1};
  EXPECT_DOUBLE_EQ(Median(even), 1.5);
}

}  // namespace
}  // namespace headroom
