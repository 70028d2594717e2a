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
  EXPECT_EQ(FormatLogLine(LogFormat::kText, At(), LogLevel::kInfo, "agent", "listening on x:1"),
            "2026-12-06T01:50:03.123Z INFO headroom agent: listening on x:1");
  EXPECT_EQ(FormatLogLine(LogFormat::kText, At(), LogLevel::kWarn, "coordinator", "warning: w"),
            "2026-12-06T01:50:03.123Z WARN headroom coordinator: warning: w");
  ::unsetenv("TZ");
}

TEST(DaemonLog, JsonLinesAreOneObjectWithTsLevelDaemonAndMsg) {
  const std::string line = FormatLogLine(LogFormat::kJson, At(), LogLevel::kError, "agent",
                                         "error: \"quoted\"\nand a newline");
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["ts"], "2026-12-06T01:50:03.123Z");
  EXPECT_EQ(j["level"], "error");
  EXPECT_EQ(j["daemon"], "agent");
  EXPECT_EQ(j["msg"], "error: \"quoted\"\nand a newline");
}

TEST(DaemonLog, LevelsAndFormatsByName) {
  EXPECT_EQ(LevelOf("warning: the trace is incomplete"), LogLevel::kWarn);
  EXPECT_EQ(LevelOf("error: x"), LogLevel::kError);
  EXPECT_EQ(LevelOf("listening on 127.0.0.1:1"), LogLevel::kInfo);
  LogFormat f = LogFormat::kText;
  EXPECT_TRUE(ParseLogFormat("json", &f));
  EXPECT_EQ(f, LogFormat::kJson);
  EXPECT_TRUE(ParseLogFormat("text", &f));
  EXPECT_EQ(f, LogFormat::kText);
  EXPECT_FALSE(ParseLogFormat("JSON", &f));
}

}  // namespace
}  // namespace headroom::cli
