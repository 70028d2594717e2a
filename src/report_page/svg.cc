#include "report_page/svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "report_page/format.h"

namespace headroom::report {
namespace {

constexpr double kLeft = 70.0;
constexpr double kRight = 20.0;
constexpr double kTop = 16.0;
constexpr double kBottom = 46.0;
constexpr int kTargetTicks = 6;

double Transform(double v, const Axis& a) { return a.log ? std::log10(std::max(v, 1e-300)) : v; }

// Trailing zeros after the point, and a point left alone, dropped: "1,250.500" -> "1,250.5".
std::string Trim(std::string s) {
  if (s.find('.') == std::string::npos) return s;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

// Tick labels as people read them: thousands separated, never in scientific notation, with as
// many decimals as the ticks' spacing needs.
std::vector<std::string> TickLabels(const std::vector<double>& ticks, bool log) {
  std::vector<std::string> out;
  double step = 0.0;
  for (size_t i = 1; i < ticks.size(); ++i) {
    const double d = std::abs(ticks[i] - ticks[i - 1]);
    if (d > 0.0 && (step == 0.0 || d < step)) step = d;
  }
  for (double v : ticks) {
    if (log || step == 0.0) {
      out.push_back(Trim(Significant(v, 3)));
    } else {
      const int decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(step))) + 1, 0, 6);
      out.push_back(Trim(Number(v, decimals)));
    }
  }
  return out;
}

}  // namespace

std::vector<double> NiceTicks(double min, double max, bool log) {
  std::vector<double> ticks;
  if (!(max > min)) return {min};
  if (log) {
    for (double d = std::pow(10.0, std::floor(std::log10(min))); d <= max * 1.0000001; d *= 10.0) {
      for (double m : {1.0, 2.0, 5.0}) {
        const double v = d * m;
        if (v >= min * 0.9999999 && v <= max * 1.0000001) ticks.push_back(v);
      }
    }
    return ticks;
  }
  const double raw = (max - min) / kTargetTicks;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * magnitude) {
      step = m * magnitude;
      break;
    }
  }
  for (double v = std::ceil(min / step) * step; v <= max + step * 1e-9; v += step) {
    ticks.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  }
  return ticks;
}

std::string HtmlEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

double SvgChart::X(double v) const {
  const double lo = Transform(x_.min, x_), hi = Transform(x_.max, x_);
  return kLeft + (Transform(v, x_) - lo) / (hi - lo) * (kWidth - kLeft - kRight);
}

double SvgChart::Y(double v) const {
  const double lo = Transform(y_.min, y_), hi = Transform(y_.max, y_);
  return kHeight - kBottom - (Transform(v, y_) - lo) / (hi - lo) * (kHeight - kTop - kBottom);
}

void SvgChart::Band(const std::vector<double>& xs, const std::vector<double>& lo,
                    const std::vector<double>& hi, const std::string& color,
                    const std::string& label) {
  if (xs.empty()) return;
  std::string points;
  for (size_t i = 0; i < xs.size(); ++i)
    points += fmt::format("{:.1f},{:.1f} ", X(xs[i]), Y(hi[i]));
  for (size_t i = xs.size(); i-- > 0;) points += fmt::format("{:.1f},{:.1f} ", X(xs[i]), Y(lo[i]));
  body_ += fmt::format(
      R"svg(<polygon points="{}" fill="{}" fill-opacity="0.35" stroke="none"/>)svg", points, color);
  body_ += '\n';
  legend_.emplace_back(color, label);
}

void SvgChart::Line(const std::vector<double>& xs, const std::vector<double>& ys,
                    const std::string& color, const std::string& label, bool dashed) {
  if (xs.empty()) return;
  std::string points;
  for (size_t i = 0; i < xs.size(); ++i)
    points += fmt::format("{:.1f},{:.1f} ", X(xs[i]), Y(ys[i]));
  body_ +=
      fmt::format(R"svg(<polyline points="{}" fill="none" stroke="{}" stroke-width="1.6"{}/>)svg",
                  points, color, dashed ? R"svg( stroke-dasharray="5,4")svg" : "");
  body_ += '\n';
  legend_.emplace_back(color, label);
}

void SvgChart::Points(const std::vector<double>& xs, const std::vector<double>& ys,
                      const std::string& color, const std::string& label) {
  for (size_t i = 0; i < xs.size(); ++i) {
    body_ +=
        fmt::format(R"svg(<circle cx="{:.1f}" cy="{:.1f}" r="3" fill="{}" fill-opacity="0.7"/>)svg",
                    X(xs[i]), Y(ys[i]), color);
  }
  body_ += '\n';
  legend_.emplace_back(color, label);
}

void SvgChart::HorizontalRule(double y, const std::string& color, const std::string& label) {
  if (y < y_.min || y > y_.max) return;
  body_ += fmt::format(
      R"svg(<line x1="{:.1f}" x2="{:.1f}" y1="{:.1f}" y2="{:.1f}" stroke="{}" stroke-width="1.4" stroke-dasharray="6,4"/>)svg",
      kLeft, kWidth - kRight, Y(y), Y(y), color);
  body_ += '\n';
  legend_.emplace_back(color, label);
}

std::string SvgChart::Legend() const {
  // HTML under the chart, not SVG over it: it wraps inside the page however many series.
  std::string out;
  for (const auto& [color, label] : legend_) {
    if (label.empty()) continue;
    out += fmt::format(R"(<span><i style="background:{}"></i>{}</span>)", HtmlEscape(color),
                       HtmlEscape(label));
  }
  return out.empty() ? "" : "<div class=\"legend\">" + out + "</div>\n";
}

std::string SvgChart::Render() const {
  const double plot_bottom = kHeight - kBottom;
  const double plot_right = kWidth - kRight;
  // The data are clipped to the plot frame (a chart's axes cover its data; the clip keeps a
  // value off its scale, an outlier, from drawing over the labels). The id is the chart's own,
  // from its content: two charts on a page differ, the same chart twice draws the same.
  const std::string clip =
      fmt::format("clip-{:016x}", std::hash<std::string>{}(body_ + x_.label + "\n" + y_.label));
  std::string out = fmt::format(
      R"svg(<figure class="chart"><svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {} {}" width="100%" role="img" font-family="sans-serif">)svg",
      kWidth, kHeight);
  out += fmt::format(
      R"svg(<defs><clipPath id="{}"><rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}"/></clipPath></defs>)svg",
      clip, kLeft, kTop, plot_right - kLeft, plot_bottom - kTop);
  out += '\n';
  // Ticks are chosen in the units the labels show (value / scale).
  const std::vector<double> y_ticks = NiceTicks(y_.min / y_.scale, y_.max / y_.scale, y_.log);
  const std::vector<std::string> y_labels = TickLabels(y_ticks, y_.log);
  for (size_t i = 0; i < y_ticks.size(); ++i) {
    const double t = y_ticks[i] * y_.scale;
    out += fmt::format(
        R"svg(<line x1="{:.1f}" x2="{:.1f}" y1="{:.1f}" y2="{:.1f}" stroke="#ddd"/><text x="{:.1f}" y="{:.1f}" font-size="11" text-anchor="end">{}</text>)svg",
        kLeft, plot_right, Y(t), Y(t), kLeft - 6.0, Y(t) + 4.0, y_labels[i]);
    out += '\n';
  }
  const std::vector<double> x_ticks = NiceTicks(x_.min / x_.scale, x_.max / x_.scale, x_.log);
  const std::vector<std::string> x_labels = TickLabels(x_ticks, x_.log);
  for (size_t i = 0; i < x_ticks.size(); ++i) {
    const double t = x_ticks[i] * x_.scale;
    out += fmt::format(
        R"svg(<line x1="{:.1f}" x2="{:.1f}" y1="{:.1f}" y2="{:.1f}" stroke="#eee"/><text x="{:.1f}" y="{:.1f}" font-size="11" text-anchor="middle">{}</text>)svg",
        X(t), X(t), kTop, plot_bottom, X(t), plot_bottom + 16.0, x_labels[i]);
    out += '\n';
  }
  out += fmt::format(
      R"svg(<rect class="frame" x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="none" stroke="#888"/>)svg",
      kLeft, kTop, plot_right - kLeft, plot_bottom - kTop);
  out += fmt::format(
      R"svg(<text x="{:.1f}" y="{:.1f}" font-size="12" text-anchor="middle">{}</text>)svg",
      (kLeft + plot_right) / 2.0, kHeight - 8.0, HtmlEscape(x_.label));
  out += fmt::format(
      R"svg(<text x="14" y="{:.1f}" font-size="12" text-anchor="middle" transform="rotate(-90 14 {:.1f})">{}</text>)svg",
      (kTop + plot_bottom) / 2.0, (kTop + plot_bottom) / 2.0, HtmlEscape(y_.label));
  out += '\n';
  out += fmt::format(R"svg(<g class="data" clip-path="url(#{})">)svg", clip);
  out += body_;
  out += "</g></svg>\n";
  out += Legend();
  out += "</figure>\n";
  return out;
}

}  // namespace headroom::report
