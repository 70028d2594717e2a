// What the commands that write files share: inputs to protect, and the size of large outputs.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace headroom::cli {

// The {flag, path} inputs of a trace for RefuseOutputOverInput: the trace, and the sidecars of
// it that exist (trace::LoadMetaFor's candidates).
std::vector<std::pair<std::string, std::string>> TraceInputs(const std::string& flag,
                                                             const std::string& path);

// The {flag, path} input of a --scenario: the file, or nothing for a built-in name.
std::vector<std::pair<std::string, std::string>> ScenarioInputs(const std::string& flag,
                                                                const std::string& names);

// "950 B", "12 kB", "1.2 GB", "3.4 PB": decimal units, two significant digits from 10 kB up.
std::string FormatBytes(double bytes);

// Outputs from this size up are announced on stderr before they are written.
inline constexpr double kAnnounceBytes = 100e6;

// Before writing about `bytes` to `path`: fails with an Io error (one line) when the file system
// that will hold `path` (its directory, after links) has less free space than that, else prints
// "LABEL: about SIZE to write to PATH" on stderr when bytes >= kAnnounceBytes. A file system
// that cannot say (statvfs fails) is not checked.
Status CheckOutputSpace(std::string_view label, const std::string& path, double bytes);

}  // namespace headroom::cli
