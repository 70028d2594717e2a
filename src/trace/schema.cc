#include "trace/schema.h"

#include <fmt/format.h>

namespace headroom::trace {

Result<TraceFormat> ParseTraceFormat(std::string_view name) {
  if (name == "auto") return TraceFormat::kAuto;
  if (name == "long") return TraceFormat::kLong;
  if (name == "wide") return TraceFormat::kWide;
  if (name == "nvidia-smi") return TraceFormat::kNvidiaSmi;
  return Error::Usage(
      fmt::format("unknown trace format '{}' (use auto, long, wide or nvidia-smi)", name));
}

std::string_view TraceFormatName(TraceFormat format) {
  switch (format) {
    case TraceFormat::kAuto:
      return "auto";
    case TraceFormat::kLong:
      return "long";
    case TraceFormat::kWide:
      return "wide";
    case TraceFormat::kNvidiaSmi:
      return "nvidia-smi";
  }
  return "?";
}

void SampleBatch::Reserve(size_t capacity, const TraceSchema& schema) {
  gpu.assign(capacity, 0);
  t_s.assign(capacity, 0.0);
  power_w.assign(capacity, 0.0);
  for (size_t i = 0; i < kFieldCount; ++i)
    fields[i].assign(schema.has_field.test(i) ? capacity : 0, 0.0);
  phase.assign(schema.has_phase ? capacity : 0, kNoPhase);
  count = 0;
}

}  // namespace headroom::trace
