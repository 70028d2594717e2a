// The daemons' log lines: RFC 3339 UTC time to the millisecond, a level, text or JSON.
#include "cli/daemon_log.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace headroom::cli {
namespace {

// 2026-12-06T01:50:03.123Z, computed independently (Python's datetime: 1796521803 s).
std::chrono::system_clock::time_point At() {
  return std::chrono::system_clock::time_point(std::chrono::milliseconds(1796521803123));
}

TEST(DaemonLog, TextLinesCarryTheUtcTimeToTheMillisecondAndALevel) {
  ::setenv("TZ", "America/New_York", 1);  // the local zone must not leak into the stamp
  EXPECT_EQ(
      FormatLogLine(LogFormat::kText, At(), "agent", {LogLevel::kInfo, "listening on x:1", {}}),
      "2026-12-06T01:50:03.123Z INFO headroom agent: listening on x:1");
  EXPECT_EQ(FormatLogLine(LogFormat::kText, At(), "coordinator",
                          {LogLevel::kWarn, "w", {{"job", "a"}, {"held_w", 5.0}}}),
            "2026-12-06T01:50:03.123Z WARN headroom coordinator: w");
  ::unsetenv("TZ");
}

// Issue 53, item 6: a value from outside in a message (a member's key holding a newline) cannot
// start a line of its own in the text format, which is what a forged "ERROR" line needs.
TEST(DaemonLog, TextLinesEscapeControlBytes) {
  const std::string forged =
      "member a\n2026-12-06T01:50:03.123Z ERROR headroom coordinator: forged\r\t\x1b[31m\x7f";
  const std::string line =
      FormatLogLine(LogFormat::kText, At(), "coordinator", {LogLevel::kInfo, forged, {}});
  EXPECT_EQ(
      line,
      "2026-12-06T01:50:03.123Z INFO headroom coordinator: member a\\n2026-12-06T01:50:03.123Z "
      "ERROR headroom coordinator: forged\\r\\t\\x1b[31m\\x7f");
  for (char c : line) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << line;
  // Backslashes, quotes and UTF-8 stay as they are.
  EXPECT_EQ(EscapeControls("C:\\x \"é\" 5 W"), "C:\\x \"é\" 5 W");
  EXPECT_EQ(EscapeControls(std::string("a\0b", 3)), "a\\x00b");
}

// ...and with --log-format json the fatal error is one of the JSON lines, not plain text.
TEST(DaemonLog, TheFatalLineIsJsonWhenTheCommandWasAskedForJson) {
  for (const char* format : {"json", "text", ""}) {
    CLI::App agent("", "agent");
    std::string log_format = "text";
    agent.add_option("--log-format", log_format, "text or json");
    std::vector<std::string> args;
    if (*format != '\0') args = {format, "--log-format"};  // CLI11 takes them last first
    agent.parse(args);
    const auto line = FatalJsonLine(agent, "--listen: 'nowhere': expected HOST:PORT", 2);
    if (std::string(format) != "json") {
      EXPECT_FALSE(line.has_value()) << format;
      continue;
    }
    ASSERT_TRUE(line.has_value());
    EXPECT_EQ(line->find('\n'), std::string::npos);
    const auto j = nlohmann::json::parse(*line);
    EXPECT_EQ(j["level"], "error");
    EXPECT_EQ(j["daemon"], "agent");
    EXPECT_EQ(j["msg"], "--listen: 'nowhere': expected HOST:PORT");
    EXPECT_EQ(j["exit_status"], 2);
    EXPECT_EQ(j["ts"].get<std::string>().size(), std::string("2026-12-06T01:50:03.123Z").size());
  }
  CLI::App none("", "analyze");  // a command without --log-format: the plain line
  std::vector<std::string> args;
  none.parse(args);
  EXPECT_FALSE(FatalJsonLine(none, "x", 1).has_value());
}

TEST(DaemonLog, JsonLinesAreOneObjectWithTsLevelDaemonMsgAndTheFields) {
  const LogEvent e{LogLevel::kError,
                   "\"quoted\"\nand a newline",
                   {{"gpu", 3},
                    {"limit_w", 212.5},
                    {"site", "hall-a"},
                    {"fenced", true},
                    {"msg", "a field named like a key"}}};
  const std::string line = FormatLogLine(LogFormat::kJson, At(), "agent", e);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(line.rfind("{\"ts\":\"2026-12-06T01:50:03.123Z\",\"level\":\"error\",", 0), 0u) << line;
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["ts"], "2026-12-06T01:50:03.123Z");
  EXPECT_EQ(j["level"], "error");
  EXPECT_EQ(j["daemon"], "agent");
  EXPECT_EQ(j["msg"], "\"quoted\"\nand a newline");
  EXPECT_EQ(j["gpu"], 3);
  EXPECT_TRUE(j["gpu"].is_number_integer());
  EXPECT_EQ(j["limit_w"], 212.5);
  EXPECT_EQ(j["site"], "hall-a");
  EXPECT_EQ(j["fenced"], true);
  EXPECT_EQ(j["field_msg"], "a field named like a key");
  EXPECT_EQ(j.size(), 9u);
}

TEST(DaemonLog, FormatsByNameAndLoggersByWhatTheyTake) {
  LogFormat f = LogFormat::kText;
  EXPECT_TRUE(ParseLogFormat("json", &f));
  EXPECT_EQ(f, LogFormat::kJson);
  EXPECT_TRUE(ParseLogFormat("text", &f));
  EXPECT_EQ(f, LogFormat::kText);
  EXPECT_FALSE(ParseLogFormat("JSON", &f));
  // A logger from a callable of the message alone gets each message; of an event, the event.
  std::string text;
  Logger by_text([&text](const std::string& m) { text += m + ";"; });
  by_text("a");
  by_text.Warn("b", {{"k", 1}});
  EXPECT_EQ(text, "a;b;");
  LogEvent last;
  Logger by_event([&last](const LogEvent& e) { last = e; });
  by_event.Error("c", {{"gpu", 2}});
  EXPECT_EQ(last.level, LogLevel::kError);
  EXPECT_EQ(last.msg, "c");
  ASSERT_EQ(last.fields.size(), 1u);
  EXPECT_EQ(std::get<std::int64_t>(last.fields[0].value), 2);
  Logger().Warn("discarded");  // a default logger drops everything
}

}  // namespace
}  // namespace headroom::cli
