// A bounded-memory picture of a long series for plots: min, max and mean per time bucket.
// Buckets start kInitialBucketS wide and double (merging pairs) whenever the series outgrows
// kMaxBuckets, so any trace length fits in kMaxBuckets buckets.
//
// Not thread-safe: one writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace headroom::analysis {

class Envelope {
 public:
  static constexpr size_t kMaxBuckets = 1024;
  static constexpr double kInitialBucketS = 0.5;

  struct Bucket {
    double min_w = 0.0;
    double max_w = 0.0;
    double sum_w = 0.0;
    uint64_t count = 0;
  };

  void Add(double t_s, double power_w);

  double origin_s() const { return origin_s_; }
  double bucket_s() const { return bucket_s_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  void Coarsen();

  bool started_ = false;
  double origin_s_ = 0.0;
  double bucket_s_ = kInitialBucketS;
  std::vector<Bucket> buckets_;
};

}  // namespace headroom::analysis
