// Human-readable terminal output: aligned tables.
#pragma once

#include <string>
#include <vector>

#include "analysis/analyzer.h"
#include "planning/fleet.h"
#include "report/json.h"

namespace headroom::report {

// A plain text table: a header row, then rows; the first column left-aligned, the rest right.
class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) : header_(std::move(header)) {}
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // Text columns read better left-aligned.
  void AlignLeft(size_t column) { left_.push_back(column); }
  std::string Render() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<size_t> left_ = {0};
};

// settle_s on one line: "p50 1.5 s  p99 3.0 s  max 3.0 s  (4 decreases, 0 unsettled)".
std::string SettleText(const analysis::SettleSummary& s);
std::string AnalyzeToText(const analysis::AnalyzeResult& result, const TraceInfo& info);
std::string FleetToText(const planning::FleetResult& result,
                        const std::vector<planning::Job>& jobs);
// The {metric, value} rows of the summaries, for the terminal and the HTML reports alike.
std::vector<std::vector<std::string>> AnalyzeSummaryRows(const analysis::AnalyzeResult& result);
std::vector<std::vector<std::string>> FleetSummaryRows(const planning::FleetResult& result);

}  // namespace headroom::report
