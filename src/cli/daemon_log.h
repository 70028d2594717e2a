// The daemons' log lines (agent, coordinator): each with an RFC 3339 UTC timestamp and a level,
// as text or as JSON lines (`--log-format text|json`), from the events core logic writes
// (common/log.h).
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "common/log.h"

namespace headroom::cli {

enum class LogFormat { kText, kJson };

// "text" or "json"; false for anything else.
bool ParseLogFormat(std::string_view text, LogFormat* format);

// One line, without its newline. Text: "2026-12-06T01:50:03.123Z INFO headroom agent: MSG" (the
// fields are for machines: JSON only; MSG's control bytes escaped, EscapeControls, so a value
// from outside -- a member's key, a job's name -- cannot start a line of its own); JSON:
// {"ts":"2026-12-06T01:50:03.123Z","level":"info", "daemon":"agent","msg":"MSG", then each
// field by its key}. A field named like one of the four keys is written as "field_KEY".
std::string FormatLogLine(LogFormat format, std::chrono::system_clock::time_point t,
                          std::string_view daemon, const LogEvent& event);

// `text` with its control bytes (below 0x20, and 0x7f) escaped: \n, \r, \t, else \xNN.
// Other bytes, backslashes and UTF-8 included, are kept.
std::string EscapeControls(std::string_view text);

// A daemon's fatal error as one of its JSON log lines ({"ts":...,"level":"error","daemon":
// COMMAND,"msg":MESSAGE,"exit_status":N}) when `command` was given --log-format json, on the
// command line or in its --config; nullopt otherwise (the plain "headroom: error: ..." line).
std::optional<std::string> FatalJsonLine(const CLI::App& command, std::string_view message,
                                         int exit_status);

// A daemon's logger: each event a line on `stream` at the wall clock's time, one line at a time
// however many threads log.
Logger StreamLogger(LogFormat format, std::string daemon, std::FILE* stream = stderr);

}  // namespace headroom::cli
