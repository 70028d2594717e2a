// The daemons' log lines (agent, coordinator): each with an RFC 3339 UTC timestamp and a level,
// as text or as JSON lines (`--log-format text|json`).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace headroom::cli {

enum class LogFormat { kText, kJson };
enum class LogLevel { kInfo, kWarn, kError };

// "text" or "json"; false for anything else.
bool ParseLogFormat(std::string_view text, LogFormat* format);

// A message's level: "warning: ..." is kWarn, "error: ..." kError, anything else kInfo.
LogLevel LevelOf(std::string_view message);

// One line, without its newline. Text: "2026-12-06T01:50:03.123Z INFO headroom agent: MSG";
// JSON: {"ts":"2026-12-06T01:50:03.123Z","level":"info","daemon":"agent","msg":"MSG"}.
std::string FormatLogLine(LogFormat format, std::chrono::system_clock::time_point t, LogLevel level,
                          std::string_view daemon, std::string_view message);

}  // namespace headroom::cli
