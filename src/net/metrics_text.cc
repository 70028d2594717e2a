#include "net/metrics_text.h"

#include <fmt/format.h>

#include <cmath>

namespace headroom::net {

namespace {

// Help text: backslash and newline escaped (the format's rule for HELP).
std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string SampleValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

void MetricsText::Family(std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", name, EscapeHelp(help),
                 name, type);
}

void MetricsText::Sample(std::string_view name, double v) {
  AppendLine(name, {}, {}, SampleValue(v));
}

void MetricsText::Sample(std::string_view name, std::string_view label, std::string_view value,
                         double v) {
  AppendLine(name, label, value, SampleValue(v));
}

void MetricsText::AppendLine(std::string_view name, std::string_view label, std::string_view value,
                             std::string_view sample) {
  if (label.empty()) {
    fmt::format_to(std::back_inserter(out_), "{} {}\n", name, sample);
  } else {
    fmt::format_to(std::back_inserter(out_), "{}{{{}=\"{}\"}} {}\n", name, label,
                   EscapeLabelValue(value), sample);
  }
}

}  // namespace headroom::net
