// Writes traces in headroom's long format, atomically, with their sidecar.
#pragma once

#include <bitset>
#include <optional>
#include <string>
#include <string_view>

#include "common/atomic_file.h"
#include "common/error.h"
#include "trace/schema.h"

namespace headroom::trace {

// One row of the long format. Optional fields are written when the writer was opened with them;
// NaN writes an empty cell.
struct TraceRow {
  double t_s = 0.0;
  uint32_t gpu = 0;
  double power_w = 0.0;
  std::string_view phase;
  std::array<double, kFieldCount> fields{};
};

// Not thread-safe: one writer.
class TraceWriter {
 public:
  // The header is t_s,gpu,power_w, then phase if `with_phase`, then the fields in `fields` in
  // canonical order.
  static Result<TraceWriter> Open(const std::string& path, std::bitset<kFieldCount> fields,
                                  bool with_phase);

  void Write(const TraceRow& row);

  // The line Write writes for `row` (newline included) in a writer with `fields` and
  // `with_phase`, into `line`: for estimating a trace's size before writing it.
  static void FormatRow(const TraceRow& row, std::bitset<kFieldCount> fields, bool with_phase,
                        std::string& line);

  // Completes the trace and, when given, writes `<trace>.meta.json` (also atomically).
  Status Commit(const std::optional<TraceMeta>& meta);

 private:
  TraceWriter(std::string path, AtomicFileWriter file, std::bitset<kFieldCount> fields,
              bool with_phase)
      : path_(std::move(path)), file_(std::move(file)), fields_(fields), with_phase_(with_phase) {}

  std::string path_;
  AtomicFileWriter file_;
  std::bitset<kFieldCount> fields_;
  bool with_phase_;
  std::string line_;
};

}  // namespace headroom::trace
