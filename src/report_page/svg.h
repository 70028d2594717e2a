// Small SVG charts for self-contained HTML reports (no scripts, no network).
#pragma once

#include <string>
#include <vector>

namespace headroom::report {

struct Axis {
  double min = 0.0;
  double max = 1.0;
  bool log = false;
  std::string label;
  double scale = 1.0;  // tick labels show value / scale (e.g. seconds as minutes)
};

// A chart of lines, bands, points and reference lines on two axes. Not thread-safe.
class SvgChart {
 public:
  static constexpr int kWidth = 860;
  static constexpr int kHeight = 320;

  SvgChart(Axis x, Axis y) : x_(std::move(x)), y_(std::move(y)) {}

  // A filled band between lo and hi (same xs), e.g. a min/max envelope.
  void Band(const std::vector<double>& xs, const std::vector<double>& lo,
            const std::vector<double>& hi, const std::string& color, const std::string& label);
  void Line(const std::vector<double>& xs, const std::vector<double>& ys, const std::string& color,
            const std::string& label, bool dashed = false);
  void Points(const std::vector<double>& xs, const std::vector<double>& ys,
              const std::string& color, const std::string& label);
  void HorizontalRule(double y, const std::string& color, const std::string& label);

  std::string Render() const;

 private:
  double X(double v) const;
  double Y(double v) const;
  std::string Legend() const;

  Axis x_, y_;
  std::string body_;
  std::vector<std::pair<std::string, std::string>> legend_;  // color, label
};

// Escapes text for HTML.
std::string HtmlEscape(const std::string& text);

// "Nice" tick values spanning [min, max]: steps of 1, 2 or 5 x 10^k (linear) or decades (log).
std::vector<double> NiceTicks(double min, double max, bool log);

}  // namespace headroom::report
