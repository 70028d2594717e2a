// `headroom pilot report`: a pilot judged from its blocks (docs/PILOT.md). BLOCKS.csv says per
// block its arm and the trace stretches it covers; each block's statistics are the sum of its
// stretches' (pilot::BlockStats), and every metric is compared between the arms with a block
// bootstrap interval and a permutation test (pilot/statistics.h), overall and per job.
//
// Pure: BLOCKS.csv's text and the measured stretches in, a report out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "pilot/blocks.h"
#include "pilot/design.h"
#include "pilot/statistics.h"

namespace headroom::pilot {

// One row of BLOCKS.csv: a stretch of one trace that belongs to one block.
struct BlockRow {
  int64_t line = 0;  // in BLOCKS.csv, from 1
  std::string block;
  Arm arm = Arm::kControlled;
  std::string trace;
  std::string job;  // empty when the file has no job column or the cell is empty
  std::optional<double> start_s, end_s;  // in the trace's time; none: the whole trace
};

// Parses BLOCKS.csv (docs/PILOT.md, "BLOCKS.csv"): a header naming the columns block, arm and
// trace (required), job, start_s and end_s (optional; start_s and end_s together), then a row
// per stretch. Blank lines and lines starting with '#' are skipped; no quoting. Errors name
// the file, the line and the column. Rows of one block must share its arm.
Result<std::vector<BlockRow>> ParseBlocksCsv(std::string_view text, std::string_view name);

// Money and carbon (docs/PILOT.md, "Money and carbon"): the source paper's figures, as
// `headroom fleet`'s defaults.
inline constexpr double kDefaultEnergyPriceUsdPerMwh = 80.0;
inline constexpr double kDefaultCarbonGPerKwh = 250.0;

struct JudgeOptions {
  EffectOptions effect;
  std::vector<double> windows_s = kReportWindowsS;  // as the stretches were measured
  double energy_price_usd_per_mwh = kDefaultEnergyPriceUsdPerMwh;
  double carbon_g_per_kwh = kDefaultCarbonGPerKwh;
};

struct MetricEffect {
  std::string name;  // tokens_per_mwh, violations_0.5s, ..., energy_mwh, cost_usd, carbon_kg
  Effect effect;
};

struct JudgedGroup {
  std::string job;  // empty: every job
  size_t controlled_blocks = 0, uncontrolled_blocks = 0;
  std::vector<MetricEffect> metrics;
  std::vector<std::string> notes;  // what was left out, and why
};

struct JudgedBlock {
  std::string block;
  Arm arm = Arm::kControlled;
  double duration_s = 0.0;
  std::vector<std::pair<std::string, std::optional<double>>> values;  // per metric name
};

struct PilotReport {
  JudgeOptions options;
  JudgedGroup all;
  std::vector<JudgedGroup> jobs;  // when BLOCKS.csv names jobs
  std::vector<JudgedBlock> blocks;
  std::vector<std::string> warnings;
};

// `stats[i]` is the measurement of `rows[i]`. Fails with one line when an arm has fewer than 2
// blocks. REQUIRES: rows.size() == stats.size().
Result<PilotReport> JudgePilot(const std::vector<BlockRow>& rows,
                               const std::vector<BlockStats>& stats, const JudgeOptions& options);

}  // namespace headroom::pilot
