#include "analysis/sum_series.h"

#include <gtest/gtest.h>

namespace headroom::analysis {
namespace {

TEST(SumOnGrid, UnalignedGpusUseTheirLastSampleAtOrBeforeEachGridTime) {
  // GPU 0 at 0,1,2,3,4 s; GPU 1 at 0.5,1.5,2.5,3.5 s. dt = 1: grid from max(0, 0.5) = 0.5 to
  // min(4, 3.5) = 3.5 -> 0.5, 1.5, 2.5, 3.5. GPU 0 holds 10, 20, 30, 40 there; GPU 1 1, 2, 3, 4.
  const TimeSeries a{{0, 1, 2, 3, 4}, {10, 20, 30, 40, 50}};
  const TimeSeries b{{0.5, 1.5, 2.5, 3.5}, {1, 2, 3, 4}};
  const TimeSeries* parts[] = {&a, &b};
  auto grid = SumOnGrid(parts, 1.0);
  ASSERT_TRUE(grid.ok());
  EXPECT_DOUBLE_EQ(grid->t_start_s, 0.5);
  EXPECT_EQ(grid->power_w, (std::vector<double>{11, 22, 33, 44}));
}

TEST(SumOnGrid, GridPointsStopAtTheEarliestEnd) {
  // dt = 0.4 from 0: 0, 0.4, 0.8 (1.2000000000000002 > 1.1).
  const TimeSeries a{{0, 0.5, 1.1}, {1, 2, 3}};
  const TimeSeries* parts[] = {&a};
  auto grid = SumOnGrid(parts, 0.4);
  ASSERT_TRUE(grid.ok());
  EXPECT_EQ(grid->power_w, (std::vector<double>{1, 1, 2}));
}

TEST(SumOnGrid, Errors) {
  const TimeSeries a{{0, 1}, {1, 1}};
  const TimeSeries b{{5, 6}, {1, 1}};
  const TimeSeries* disjoint[] = {&a, &b};
  EXPECT_FALSE(SumOnGrid(disjoint, 1.0).ok());
  const TimeSeries* one[] = {&a};
  EXPECT_FALSE(SumOnGrid(one, 0.0).ok());
}

}  // namespace
}  // namespace headroom::analysis
