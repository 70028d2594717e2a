#include "analysis/envelope.h"

#include <algorithm>
#include <cmath>

namespace headroom::analysis {

void Envelope::Add(double t_s, double power_w) {
  if (!started_) {
    started_ = true;
    origin_s_ = t_s;
  }
  const double offset_s = std::max(0.0, t_s - origin_s_);
  auto index = static_cast<size_t>(offset_s / bucket_s_);
  while (index >= kMaxBuckets) {
    Coarsen();
    index = static_cast<size_t>(offset_s / bucket_s_);
  }
  if (index >= buckets_.size()) buckets_.resize(index + 1);
  Bucket& b = buckets_[index];
  if (b.count == 0) {
    b.min_w = b.max_w = power_w;
  } else {
    b.min_w = std::min(b.min_w, power_w);
    b.max_w = std::max(b.max_w, power_w);
  }
  b.sum_w += power_w;
  ++b.count;
}

void Envelope::Coarsen() {
  std::vector<Bucket> merged((buckets_.size() + 1) / 2);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const Bucket& src = buckets_[i];
    if (src.count == 0) continue;
    Bucket& dst = merged[i / 2];
    if (dst.count == 0) {
      dst = src;
    } else {
      dst.min_w = std::min(dst.min_w, src.min_w);
      dst.max_w = std::max(dst.max_w, src.max_w);
      dst.sum_w += src.sum_w;
      dst.count += src.count;
    }
  }
  buckets_ = std::move(merged);
  bucket_s_ *= 2.0;
}

}  // namespace headroom::analysis
