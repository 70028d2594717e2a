// Telemetry replayed from a trace file (any format `headroom analyze` reads): the agent's whole
// loop against recorded power, in real time or accelerated (the caller's clock runs faster).
// Read(t) returns, per GPU, the last sample at or before the trace's first time + t.
#pragma once

#include <memory>
#include <string>

#include "telemetry/source.h"
#include "trace/reader.h"

namespace headroom::telemetry {

class ReplaySource final : public Source {
 public:
  static Result<std::unique_ptr<ReplaySource>> Open(const std::string& path,
                                                    const trace::ReadOptions& options = {});
  // From series in memory (tests). REQUIRES: each non-empty, times non-decreasing.
  explicit ReplaySource(std::vector<trace::CollectingSink::Series> series);

  std::string_view name() const override { return "replay"; }
  int gpus() const override { return static_cast<int>(series_.size()); }
  // An Error once t is past the end of the trace.
  Result<Sample> Read(double t_s) override;
  double duration_s() const { return end_s_ - start_s_; }

 private:
  std::vector<trace::CollectingSink::Series> series_;
  std::vector<size_t> cursor_;
  double start_s_ = 0.0;
  double end_s_ = 0.0;
};

}  // namespace headroom::telemetry
