#include "cli/daemon_log.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <ctime>
#include <nlohmann/json.hpp>

namespace headroom::cli {

bool ParseLogFormat(std::string_view text, LogFormat* format) {
  if (text == "text") {
    *format = LogFormat::kText;
  } else if (text == "json") {
    *format = LogFormat::kJson;
  } else {
    return false;
  }
  return true;
}

LogLevel LevelOf(std::string_view message) {
  if (message.starts_with("warning: ") || message.starts_with("warning ")) return LogLevel::kWarn;
  if (message.starts_with("error: ")) return LogLevel::kError;
  return LogLevel::kInfo;
}

std::string FormatLogLine(LogFormat format, std::chrono::system_clock::time_point t, LogLevel level,
                          std::string_view daemon, std::string_view message) {
  const auto ms = std::chrono::time_point_cast<std::chrono::milliseconds>(t);
  const auto seconds = std::chrono::time_point_cast<std::chrono::seconds>(ms);
  const std::tm utc = fmt::gmtime(std::chrono::system_clock::to_time_t(seconds));  // not local
  const std::string ts =
      fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03d}Z", utc, static_cast<int>((ms - seconds).count()));
  const char* name = level == LogLevel::kWarn    ? "warn"
                     : level == LogLevel::kError ? "error"
                                                 : "info";
  if (format == LogFormat::kJson) {
    nlohmann::ordered_json j;
    j["ts"] = ts;
    j["level"] = name;
    j["daemon"] = daemon;
    j["msg"] = message;
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  std::string upper(name);
  for (char& c : upper) c = static_cast<char>(c - 'a' + 'A');
  return fmt::format("{} {} headroom {}: {}", ts, upper, daemon, message);
}

}  // namespace headroom::cli
