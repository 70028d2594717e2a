// Prometheus's text exposition format (0.0.4), as both daemons' GET /metrics write it (the
// agent's agent/api.cc, the coordinator's coord_server/coordinator_server.cc): one writer, one
// escaping. A family is its "# HELP" and "# TYPE" lines, then its samples; a value is written
// as the format wants it ("NaN", "+Inf", "-Inf", else the shortest decimal that reads back the
// same double; an integer count as an integer). Label values are escaped here (backslash,
// double quote, newline), and help text too (backslash, newline).
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>

namespace headroom::net {

// A label value, escaped: backslash, double quote and newline as \\, \" and \n.
std::string EscapeLabelValue(std::string_view value);
// A sample value: "NaN", "+Inf", "-Inf", or the shortest decimal of the double.
std::string SampleValue(double v);

class MetricsText {
 public:
  explicit MetricsText(std::string start = "") : out_(std::move(start)) {}

  // A family's "# HELP NAME HELP" and "# TYPE NAME TYPE" (gauge, counter, summary...).
  void Family(std::string_view name, std::string_view type, std::string_view help);
  // "NAME VALUE".
  void Sample(std::string_view name, double v);
  void Sample(std::string_view name, std::integral auto v) {
    AppendLine(name, {}, {}, std::to_string(v));
  }
  // "NAME{LABEL="VALUE"} SAMPLE", the label's value escaped.
  void Sample(std::string_view name, std::string_view label, std::string_view value, double v);
  void Sample(std::string_view name, std::string_view label, std::string_view value,
              std::integral auto v) {
    AppendLine(name, label, value, std::to_string(v));
  }
  // A family and its one sample.
  void Gauge(std::string_view name, std::string_view help, double v) {
    Family(name, "gauge", help);
    Sample(name, v);
  }
  void Counter(std::string_view name, std::string_view help, std::integral auto v) {
    Family(name, "counter", help);
    Sample(name, v);
  }

  const std::string& text() const& { return out_; }
  std::string text() && { return std::move(out_); }

 private:
  void AppendLine(std::string_view name, std::string_view label, std::string_view value,
                  std::string_view sample);

  std::string out_;
};

}  // namespace headroom::net
