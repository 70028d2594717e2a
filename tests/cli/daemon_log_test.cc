// The daemons' log lines: RFC 3339 UTC time to the millisecond, a level, text or JSON.
#include "cli/daemon_log.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>

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
