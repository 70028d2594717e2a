// The trace data model: headroom's long CSV format and the samples every reader produces.
//
// One sample is one GPU's reading at one time. Required: t_s (seconds, non-decreasing per GPU),
// gpu (an id), power_w. Optional fields are NaN where a row does not have them.
#pragma once

#include <array>
#include <bitset>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace headroom::trace {

enum class TraceFormat {
  kAuto,       // detect from the header
  kLong,       // headroom's own: t_s,gpu,power_w[,optional...]
  kWide,       // t_s plus one p<i>_w column per GPU
  kNvidiaSmi,  // raw `nvidia-smi --query-gpu=... --format=csv` log
};

Result<TraceFormat> ParseTraceFormat(std::string_view name);  // auto|long|wide|nvidia-smi
std::string_view TraceFormatName(TraceFormat format);

// The largest power of one GPU sample a trace may hold: 10 kW is several times any GPU's
// nameplate (an H100 SXM is 700 W, a B200 1000 W), so a larger value is a unit or parsing error
// (mW written as W, a counter in the power column), not a reading.
inline constexpr double kMaxPowerW = 10000.0;

// The largest magnitude of a sample's time: 1e11 s is over 3,000 years, past any Unix time in
// seconds (1.8e9 in 2027), so a larger value is a unit error (epoch milliseconds or nanoseconds
// in the t_s column). The bound also keeps every window index of a trace within int64_t at the
// shortest window (1 ms): 2e11 s / 1e-3 s = 2e14.
inline constexpr double kMaxTimeS = 1e11;

// The optional numeric columns of the long format, in their canonical order.
enum class Field : uint8_t {
  kEnergyJ,      // cumulative energy counter [J]
  kStep,         // training step
  kTokens,       // tokens produced since this GPU's previous row
  kConcurrency,  // generation concurrency in force
  kGroupSize,    // GRPO group size in force
  kBudgetW,      // power budget in force [W]
  kSmClockMhz,   // SM clock [MHz]
  kUtilPct,      // GPU utilisation [%]
};
inline constexpr size_t kFieldCount = 8;
inline constexpr std::array<std::string_view, kFieldCount> kFieldNames = {
    "energy_j",   "step",     "tokens",       "concurrency",
    "group_size", "budget_w", "sm_clock_mhz", "util_pct"};
inline constexpr std::string_view kPhaseColumn = "phase";
constexpr size_t FieldIndex(Field f) { return static_cast<size_t>(f); }

// What a trace carries. Grows while reading: GPU ids and phase names are added as first seen.
struct TraceSchema {
  TraceFormat format = TraceFormat::kLong;
  std::bitset<kFieldCount> has_field;
  bool has_phase = false;
  std::vector<std::string> gpu_ids;      // dense GPU index -> id as written in the trace
  std::vector<std::string> phase_names;  // phase index -> name

  bool Has(Field f) const { return has_field.test(FieldIndex(f)); }
};

// A batch of samples in columns: entries [0, size()) of each column are valid. Field columns are
// filled only for fields the schema has, the phase column only when it has phases.
struct SampleBatch {
  std::vector<uint32_t> gpu;  // dense GPU index (TraceSchema::gpu_ids)
  std::vector<double> t_s;
  std::vector<double> power_w;
  std::array<std::vector<double>, kFieldCount> fields;
  std::vector<uint16_t> phase;  // TraceSchema::phase_names index; kNoPhase where empty
  size_t count = 0;

  static constexpr uint16_t kNoPhase = 0xFFFF;

  size_t size() const { return count; }
  size_t capacity() const { return t_s.size(); }
  // Sizes the columns for `capacity` samples (the columns a schema has) and empties the batch.
  void Reserve(size_t capacity, const TraceSchema& schema);
  void Clear() { count = 0; }
};

// The optional `<trace>.meta.json` sidecar.
struct TraceMeta {
  std::optional<std::string> gpu_model;
  std::optional<double> nameplate_w;  // per GPU
  std::optional<double> sample_interval_s;
  std::optional<std::string> job;
  std::optional<std::string> notes;
};

}  // namespace headroom::trace
