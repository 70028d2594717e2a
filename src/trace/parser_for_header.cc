// The format of a header, and the parser for it (trace/row_parser.h).
#include <fmt/format.h>

#include <algorithm>

#include "trace/row_parser.h"

namespace headroom::trace::detail {

namespace {

bool HasColumn(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

TraceFormat DetectFormat(const std::vector<std::string>& names) {
  if (HasColumn(names, "t_s") && HasColumn(names, "gpu") && HasColumn(names, "power_w")) {
    return TraceFormat::kLong;
  }
  if (HasColumn(names, "t_s")) {
    for (const auto& name : names) {
      if (MatchNumbered(name, "p", "_w")) return TraceFormat::kWide;
    }
  }
  bool timestamp = false, power = false;
  for (const auto& name : names) {
    const std::string key = name.substr(0, name.find(" ["));
    timestamp |= key == "timestamp";
    power |= key.starts_with("power.draw");
  }
  if (timestamp && power) return TraceFormat::kNvidiaSmi;
  return TraceFormat::kAuto;
}

Result<std::unique_ptr<RowParser>> MakeParser(std::string_view name, std::string_view header,
                                              const ReadOptions& options, SampleSink& sink,
                                              ReadSummary& summary) {
  if (const char* c = FindControlByte(header.data(), header.data() + header.size())) {
    const auto column = 1 + std::count(header.data(), c, ',');
    return Error::Input(LocatedMessage(
        name, 1, static_cast<int>(column), "",
        fmt::format("control byte 0x{:02x} in the header", static_cast<unsigned char>(*c))));
  }
  const std::vector<std::string> names = SplitHeader(header);
  for (size_t i = 0; i < names.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (!names[i].empty() && names[i] == names[j]) {
        return Error::Input(
            LocatedMessage(name, 1, static_cast<int>(i + 1), names[i], "duplicate column name"));
      }
    }
  }
  TraceFormat format = options.format;
  if (format == TraceFormat::kAuto) format = DetectFormat(names);
  summary.schema.format = format;
  const auto header_error = [&](const std::string& reason) {
    return Error::Input(LocatedMessage(name, 1, 0, "", reason));
  };
  switch (format) {
    case TraceFormat::kAuto:
      return header_error(
          "unknown trace format: the header has neither t_s,gpu,power_w (long), t_s,p0_w,... "
          "(wide) nor nvidia-smi's timestamp and power.draw (see --format)");
    case TraceFormat::kLong:
    case TraceFormat::kWide:
    case TraceFormat::kNvidiaSmi: {
      MadeParser made =
          format == TraceFormat::kLong   ? MakeLongParser(name, options, sink, summary, names)
          : format == TraceFormat::kWide ? MakeWideParser(name, options, sink, summary, names)
                                         : MakeNvidiaSmiParser(name, options, sink, summary, names);
      if (made.error) return header_error(*made.error);
      if (made.needs_gpus && options.gpus_per_poll <= 0) {
        return Error::Usage(fmt::format(
            "{}: nvidia-smi log without an 'index' column: give --gpus N (the N GPUs of one "
            "poll are consecutive rows, in GPU order)",
            name));
      }
      return std::move(made.parser);
    }
  }
  return header_error("unknown trace format");
}

}  // namespace headroom::trace::detail
