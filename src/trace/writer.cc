#include "trace/writer.h"

#include <fmt/format.h>

#include <cmath>

#include "common/paths.h"
#include "trace/meta.h"

namespace headroom::trace {

Result<TraceWriter> TraceWriter::Open(const std::string& path, std::bitset<kFieldCount> fields,
                                      bool with_phase) {
  auto file = AtomicFileWriter::Open(path);
  if (!file) return std::move(file).error();
  std::string header = "t_s,gpu,power_w";
  if (with_phase) header += ",phase";
  for (size_t i = 0; i < kFieldCount; ++i) {
    if (fields.test(i)) fmt::format_to(std::back_inserter(header), ",{}", kFieldNames[i]);
  }
  header += '\n';
  file->Write(header);
  return TraceWriter(path, std::move(file).value(), fields, with_phase);
}

void TraceWriter::FormatRow(const TraceRow& row, std::bitset<kFieldCount> fields, bool with_phase,
                            std::string& line) {
  line.clear();
  auto out = std::back_inserter(line);
  // {} prints the shortest text that reads back as the same double.
  fmt::format_to(out, "{},{},{}", row.t_s, row.gpu, row.power_w);
  if (with_phase) {
    line += ',';
    line += row.phase;
  }
  for (size_t i = 0; i < kFieldCount; ++i) {
    if (!fields.test(i)) continue;
    line += ',';
    if (!std::isnan(row.fields[i])) fmt::format_to(out, "{}", row.fields[i]);
  }
  line += '\n';
}

void TraceWriter::Write(const TraceRow& row) {
  FormatRow(row, fields_, with_phase_, line_);
  file_.Write(line_);
}

Status TraceWriter::Commit(const std::optional<TraceMeta>& meta) {
  if (auto status = file_.Commit(); !status) return status;
  // In place (/dev/null, /dev/stdout): no sidecar beside it (not in /dev).
  const auto kind = CheckOutputPath(path_);
  if (meta && kind && *kind == OutputKind::kFile) {
    return WriteFileAtomically(MetaPathFor(path_), MetaToJson(*meta));
  }
  return OkStatus();
}

}  // namespace headroom::trace
