// A log event as the daemons' core logic writes it: a level, a message and named fields. The
// composition root (cli/daemon_log.h) decides how it looks (text or JSON lines) and where it goes;
// the core never formats a timestamp or touches a stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace headroom {

enum class LogLevel { kInfo, kWarn, kError };

// "info", "warn", "error".
const char* LogLevelName(LogLevel level);

// A field's value: text, a number or a flag (JSON: a string, a number, true/false).
using LogValue = std::variant<std::string, double, std::int64_t, bool>;

struct LogField {
  std::string key;  // lower_snake_case with its unit where it has one: "limit_w", "gpu"
  LogValue value;

  LogField(std::string k, std::string v) : key(std::move(k)), value(std::move(v)) {}
  LogField(std::string k, const char* v) : key(std::move(k)), value(std::string(v)) {}
  LogField(std::string k, std::string_view v) : key(std::move(k)), value(std::string(v)) {}
  LogField(std::string k, double v) : key(std::move(k)), value(v) {}
  LogField(std::string k, bool v) : key(std::move(k)), value(v) {}
  template <typename I>
  requires(std::is_integral_v<I> && !std::is_same_v<I, bool>) LogField(std::string k, I v)
      : key(std::move(k)), value(static_cast<std::int64_t>(v)) {}
};

struct LogEvent {
  LogLevel level = LogLevel::kInfo;
  std::string msg;  // one line, for a person; the fields repeat what a machine needs from it
  std::vector<LogField> fields;
};

// Where core logic logs. Copyable and cheap; a default Logger discards. A callable taking the
// message alone (a test's lambda, a one-shot command's print) receives each event's message.
class Logger {
 public:
  using Sink = std::function<void(const LogEvent&)>;

  Logger() = default;
  Logger(std::nullptr_t) {}  // NOLINT: implicit by design; discards, as Logger()
  template <typename F>
  requires std::is_invocable_v<F&, const LogEvent&> Logger(F sink)
      : sink_(std::move(sink)) {}  // NOLINT: implicit by design
  template <typename F>
  requires(std::is_invocable_v<F&, const std::string&> &&
           !std::is_invocable_v<F&, const LogEvent&> && !std::is_same_v<F, Logger>)
      Logger(F text)  // NOLINT: implicit by design
      : sink_([text = std::move(text)](const LogEvent& e) mutable { text(e.msg); }) {}

  void Info(std::string msg, std::vector<LogField> fields = {}) const {
    Write(LogLevel::kInfo, std::move(msg), std::move(fields));
  }
  void Warn(std::string msg, std::vector<LogField> fields = {}) const {
    Write(LogLevel::kWarn, std::move(msg), std::move(fields));
  }
  void Error(std::string msg, std::vector<LogField> fields = {}) const {
    Write(LogLevel::kError, std::move(msg), std::move(fields));
  }
  void operator()(std::string msg) const { Info(std::move(msg)); }     // an info line
  explicit operator bool() const { return static_cast<bool>(sink_); }  // false: discards
  void operator()(const LogEvent& event) const {
    if (sink_) sink_(event);
  }

 private:
  void Write(LogLevel level, std::string msg, std::vector<LogField> fields) const {
    if (sink_) sink_(LogEvent{level, std::move(msg), std::move(fields)});
  }

  Sink sink_;
};

}  // namespace headroom
