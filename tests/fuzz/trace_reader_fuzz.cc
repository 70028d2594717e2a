// Fuzzes the trace readers and the analyzer behind them: any bytes, every format.
// Invariants checked on whatever the reader accepts: finite times, non-decreasing per GPU,
// finite power in [0, kMaxPowerW], GPU ids and phase names free of control bytes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "../trace/trickle_source.h"  // the buffered path
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
      if (!std::isfinite(t) || t < last_[g] || !std::isfinite(p) || p < 0.0 ||
          p > headroom::trace::kMaxPowerW) {
        std::abort();
      }
      last_[g] = t;
    }
    for (const auto* names : {&schema.gpu_ids, &schema.phase_names}) {
      for (const std::string& name : *names) {
        for (const char c : name) {
          const auto byte = static_cast<unsigned char>(c);
          if ((byte < 0x20 && byte != '\t') || byte == 0x7f) std::abort();
        }
      }
    }
    next_->OnBatch(batch, schema);
  }

 private:
  headroom::trace::SampleSink* next_;
  std::vector<double> last_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  // The first byte picks the format, the scope and small limits; the second how the bytes are
  // read (in place in small or large views, or through a buffer); the rest is the file.
  const uint8_t control = data[0];
  const uint8_t reading = data[1];
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
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
  options.view_bytes = (reading & 1) ? 1 : size_t{4} << 20;  // 1: views of max_line_bytes + 2
  headroom::trace::MemorySource in_place(text);
  auto summary = headroom::trace::ReadTrace(in_place, "fuzz.csv", options, sink);
  if (summary.ok()) (void)analyzer.Finish(summary->schema);
  // Differential: the buffered path must give exactly the same samples, warnings or error.
  headroom::trace::TrickleSource buffered(text, 1 + reading % 61);
  headroom::trace::CollectingSink in_place_samples, buffered_samples;
  headroom::trace::MemorySource again(text);
  auto a = headroom::trace::ReadTrace(again, "fuzz.csv", options, in_place_samples);
  auto b = headroom::trace::ReadTrace(buffered, "fuzz.csv", options, buffered_samples);
  if (a.ok() != b.ok()) std::abort();
  if (!a.ok()) {
    if (a.error().message() != b.error().message()) std::abort();
    return 0;
  }
  if (a->samples != b->samples || a->warnings != b->warnings ||
      a->schema.gpu_ids != b->schema.gpu_ids) {
    std::abort();
  }
  const auto& x = in_place_samples.series();
  const auto& y = buffered_samples.series();
  if (x.size() != y.size()) std::abort();
  for (size_t g = 0; g < x.size(); ++g) {
    if (x[g].t_s != y[g].t_s || x[g].power_w != y[g].power_w) std::abort();
  }
  return 0;
}
