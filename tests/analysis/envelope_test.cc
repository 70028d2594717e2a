#include "analysis/envelope.h"

#include <gtest/gtest.h>

namespace headroom::analysis {
namespace {

TEST(Envelope, KeepsMinMaxAndMeanPerBucket) {
  Envelope e;
  e.Add(10.0, 5.0);
  e.Add(10.2, 9.0);
  e.Add(10.6, 1.0);  // second 0.5 s bucket
  ASSERT_EQ(e.buckets().size(), 2u);
  EXPECT_DOUBLE_EQ(e.origin_s(), 10.0);
  EXPECT_DOUBLE_EQ(e.buckets()[0].min_w, 5.0);
  EXPECT_DOUBLE_EQ(e.buckets()[0].max_w, 9.0);
  EXPECT_DOUBLE_EQ(e.buckets()[0].sum_w, 14.0);
  EXPECT_EQ(e.buckets()[1].count, 1u);
}

TEST(Envelope, StaysBoundedAndKeepsTheExtremes) {
  Envelope e;
  for (int i = 0; i < 1'000'000; ++i) e.Add(i * 0.1, i == 777'777 ? 1000.0 : (i == 5 ? -3.0 : 1.0));
  EXPECT_LE(e.buckets().size(), Envelope::kMaxBuckets);
  double max_w = 0, min_w = 0;
  uint64_t count = 0;
  for (const auto& b : e.buckets()) {
    max_w = std::max(max_w, b.max_w);
    min_w = std::min(min_w, b.min_w);
    count += b.count;
  }
  EXPECT_EQ(count, 1'000'000u);
  EXPECT_DOUBLE_EQ(max_w, 1000.0);
  EXPECT_DOUBLE_EQ(min_w, -3.0);
  EXPECT_GE(e.bucket_s() * Envelope::kMaxBuckets, 99'999.9);
}

}  // namespace
}  // namespace headroom::analysis
