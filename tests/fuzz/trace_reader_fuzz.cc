// Fuzzes the trace readers and the analyzer behind them: any bytes, every format.
// Invariants checked on whatever the reader accepts: finite times, non-decreasing per GPU,
// finite non-negative power.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "analysis/analyzer.h"
#include "trace/reader.h"

namespace {

using headroom::trace::SampleBatch;
using headroom::trace::TraceSchema;

class CheckingSink final : public headroom::trace::SampleSink {
 public:
  explicit CheckingSink(headroom::trace::SampleSink* next) : next_(next) {}
  void OnBatch(const SampleBatch& batch, const TraceSchema& schema) override {
    for (size_t i = 0; i < batch.size(); ++i) {
      const uint32_t g = batch.gpu[i];
      if (g >= schema.gpu_ids.size()) std::abort();
      if (last_.size() <= g) last_.resize(g + 1, -INFINITY);
      const double t = batch.t_s[i], p = batch.power_w[i];
      if (!std::isfinite(t) || t < last_[g] || !std::isfinite(p) || p < 0.0) std::abort();
      last_[g] = t;
    }
    next_->OnBatch(batch, schema);
  }

 private:
  headroom::trace::SampleSink* next_;
  std::vector<double> last_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the format, the scope and small limits; the rest is the file.
  const uint8_t control = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  headroom::trace::ReadOptions options;
  options.format = static_cast<headroom::trace::TraceFormat>(control % 4);
  options.gpus_per_poll = 1 + (control >> 2) % 4;
  options.max_line_bytes = (control & 0x40) ? 64 : 4096;
  options.batch_rows = (control & 0x80) ? 3 : 4096;
  headroom::analysis::AnalyzeOptions analyze;
  analyze.scope =
      (control & 0x10) ? headroom::analysis::Scope::kSum : headroom::analysis::Scope::kGpu;
  analyze.windows_s = {0.5, 2.0};
  analyze.budget_w = 100.0;
  analyze.plot_data = (control & 0x20) != 0;
  headroom::analysis::Analyzer analyzer(analyze);
  CheckingSink sink(&analyzer);
  headroom::trace::MemorySource source(text);
  auto summary = headroom::trace::ReadTrace(source, "fuzz.csv", options, sink);
  if (summary.ok()) (void)analyzer.Finish(summary->schema);
  return 0;
}
