#include "cli/daemon_log.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <ctime>
#include <mutex>
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

std::string FormatLogLine(LogFormat format, std::chrono::system_clock::time_point t,
                          std::string_view daemon, const LogEvent& event) {
  const auto ms = std::chrono::time_point_cast<std::chrono::milliseconds>(t);
  const auto seconds = std::chrono::time_point_cast<std::chrono::seconds>(ms);
  const std::tm utc = fmt::gmtime(std::chrono::system_clock::to_time_t(seconds));  // not local
  const std::string ts =
      fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03d}Z", utc, static_cast<int>((ms - seconds).count()));
  const char* name = LogLevelName(event.level);
  if (format == LogFormat::kJson) {
    nlohmann::ordered_json j;
    j["ts"] = ts;
    j["level"] = name;
    j["daemon"] = daemon;
    j["msg"] = event.msg;
    for (const LogField& f : event.fields) {
      const bool reserved =
          f.key == "ts" || f.key == "level" || f.key == "daemon" || f.key == "msg";
      const std::string key = reserved ? "field_" + f.key : f.key;
      std::visit([&](const auto& v) { j[key] = v; }, f.value);
    }
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  std::string upper(name);
  for (char& c : upper) c = static_cast<char>(c - 'a' + 'A');
  return fmt::format("{} {} headroom {}: {}", ts, upper, daemon, EscapeControls(event.msg));
}

std::string EscapeControls(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (byte < 0x20 || byte == 0x7f) {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += c;
    }
  }
  return out;
}

std::optional<std::string> FatalJsonLine(const CLI::App& command, std::string_view message,
                                         int exit_status) {
  const CLI::Option* format = command.get_option_no_throw("--log-format");
  if (format == nullptr || format->count() == 0) return std::nullopt;
  LogFormat f = LogFormat::kText;
  if (!ParseLogFormat(format->as<std::string>(), &f) || f != LogFormat::kJson) return std::nullopt;
  return FormatLogLine(LogFormat::kJson, std::chrono::system_clock::now(), command.get_name(),
                       {LogLevel::kError, std::string(message), {{"exit_status", exit_status}}});
}

Logger StreamLogger(LogFormat format, std::string daemon, std::FILE* stream) {
  static std::mutex mu;  // every StreamLogger of the process: one line at a time
  return Logger([format, daemon = std::move(daemon), stream](const LogEvent& e) {
    const std::string line = FormatLogLine(format, std::chrono::system_clock::now(), daemon, e);
    std::lock_guard lock(mu);
    fmt::print(stream, "{}\n", line);
    std::fflush(stream);
  });
}

}  // namespace headroom::cli
