#include "pilot/judge.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>

#include "common/duration.h"

namespace headroom::pilot {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

std::vector<std::string_view> SplitFields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    out.push_back(
        Trim(line.substr(start, comma == std::string_view::npos ? line.npos : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

// A finite plain decimal, or nullopt.
std::optional<double> ParseNumber(std::string_view text) {
  double v = 0.0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v, std::chars_format::general);
  if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::string Quote(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, 40)) {
    const auto u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u >= 0x7f) ? fmt::format("\\x{:02x}", u) : std::string(1, c);
  }
  if (text.size() > 40) out += "...";
  return "'" + out + "'";
}

}  // namespace

Result<std::vector<BlockRow>> ParseBlocksCsv(std::string_view text, std::string_view name) {
  std::vector<BlockRow> rows;
  std::map<std::string, int> columns;  // name -> index
  std::vector<std::string> header;
  std::map<std::string, std::pair<Arm, int64_t>> arm_of_block;  // block -> arm, first line
  int64_t line_no = 0;
  size_t pos = 0;
  const auto err = [&](int column, std::string_view field, std::string reason) {
    return Error::Input(LocatedMessage(name, line_no, column, field, reason));
  };
  while (pos <= text.size()) {
    const size_t nl = text.find('\n', pos);
    const std::string_view raw =
        text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    ++line_no;
    const std::string_view line = Trim(raw);
    if (line.empty() || line.front() == '#') continue;
    const auto fields = SplitFields(line);
    if (header.empty()) {
      for (size_t i = 0; i < fields.size(); ++i) {
        const std::string f(fields[i]);
        if (f != "block" && f != "arm" && f != "trace" && f != "job" && f != "start_s" &&
            f != "end_s") {
          return err(static_cast<int>(i + 1), "",
                     fmt::format("unknown column {}: expected block, arm, trace, job, start_s, "
                                 "end_s",
                                 Quote(f)));
        }
        if (columns.count(f)) {
          return err(static_cast<int>(i + 1), "", fmt::format("column {} twice", Quote(f)));
        }
        columns[f] = static_cast<int>(i);
        header.push_back(f);
      }
      for (const char* need : {"block", "arm", "trace"}) {
        if (!columns.count(need)) {
          return err(0, "", fmt::format("the header has no '{}' column", need));
        }
      }
      if (columns.count("start_s") != columns.count("end_s")) {
        return err(0, "", "start_s and end_s come together: give both columns or neither");
      }
      continue;
    }
    if (fields.size() != header.size()) {
      return err(0, "", fmt::format("{} fields, the header has {}", fields.size(), header.size()));
    }
    const auto cell = [&](const char* column) -> std::string_view {
      const auto it = columns.find(column);
      return it == columns.end() ? std::string_view() : fields[static_cast<size_t>(it->second)];
    };
    const auto col = [&](const char* column) { return columns.at(column) + 1; };
    BlockRow row;
    row.line = line_no;
    row.block = std::string(cell("block"));
    if (row.block.empty()) return err(col("block"), "block", "empty: name the block");
    const std::string_view arm = cell("arm");
    if (arm == "controlled") {
      row.arm = Arm::kControlled;
    } else if (arm == "uncontrolled") {
      row.arm = Arm::kUncontrolled;
    } else {
      return err(col("arm"), "arm",
                 fmt::format("{} is not controlled or uncontrolled", Quote(arm)));
    }
    row.trace = std::string(cell("trace"));
    if (row.trace.empty()) return err(col("trace"), "trace", "empty: name a trace of --traces");
    row.job = std::string(cell("job"));
    if (columns.count("start_s")) {
      const std::string_view s = cell("start_s"), e = cell("end_s");
      if (s.empty() != e.empty()) {
        return err(col(s.empty() ? "start_s" : "end_s"), s.empty() ? "start_s" : "end_s",
                   "empty while the other is not: give both, or neither for the whole trace");
      }
      if (!s.empty()) {
        row.start_s = ParseNumber(s);
        if (!row.start_s) {
          return err(col("start_s"), "start_s", fmt::format("{} is not a number", Quote(s)));
        }
        row.end_s = ParseNumber(e);
        if (!row.end_s) {
          return err(col("end_s"), "end_s", fmt::format("{} is not a number", Quote(e)));
        }
        if (!(*row.end_s > *row.start_s)) {
          return err(col("end_s"), "end_s",
                     fmt::format("{} is not after start_s {}", *row.end_s, *row.start_s));
        }
      }
    }
    const auto [it, inserted] = arm_of_block.try_emplace(row.block, row.arm, line_no);
    if (!inserted && it->second.first != row.arm) {
      return err(col("arm"), "arm",
                 fmt::format("block {} is {} on line {}: a block has one arm", Quote(row.block),
                             ArmName(it->second.first), it->second.second));
    }
    rows.push_back(std::move(row));
  }
  if (header.empty()) return Error::Input(fmt::format("{}: empty: no header", name));
  if (rows.empty()) return Error::Input(fmt::format("{}: no blocks after the header", name));
  return rows;
}

namespace {

struct MetricDef {
  std::string name;
  // The block's value, or nullopt (then the metric is left out, with `why`).
  std::function<std::optional<double>(const BlockStats&)> value;
  std::string why;
};

std::vector<MetricDef> Metrics(const JudgeOptions& o) {
  std::vector<MetricDef> m;
  m.push_back({"tokens_per_mwh", [](const BlockStats& b) { return b.TokensPerMwh(); },
               "a trace has no tokens column"});
  for (size_t w = 0; w < o.windows_s.size(); ++w) {
    m.push_back({"violations_" + FormatDurationS(o.windows_s[w]),
                 [w](const BlockStats& b) { return b.ViolationFraction(w); },
                 fmt::format("no budget (--budget-w or a budget_w column), or a block without a "
                             "whole {} window",
                             FormatDurationS(o.windows_s[w]))});
  }
  m.push_back({"energy_mwh", [](const BlockStats& b) { return b.EnergyMwh(); }, ""});
  const double usd = o.energy_price_usd_per_mwh;
  m.push_back({"cost_usd", [usd](const BlockStats& b) { return b.EnergyMwh() * usd; }, ""});
  // MWh x 1000 kWh/MWh x g/kWh / 1000 g/kg = MWh x g/kWh kg.
  const double g = o.carbon_g_per_kwh;
  m.push_back({"carbon_kg", [g](const BlockStats& b) { return b.EnergyMwh() * g; }, ""});
  return m;
}

struct GroupBlock {
  std::string block;
  Arm arm;
  BlockStats stats;
};

// Blocks in order of first appearance, each the sum of its rows (of `job` when not empty).
std::vector<GroupBlock> Gather(const std::vector<BlockRow>& rows,
                               const std::vector<BlockStats>& stats, const std::string* job) {
  std::vector<GroupBlock> blocks;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (job && rows[i].job != *job) continue;
    const auto [it, inserted] = index.try_emplace(rows[i].block, blocks.size());
    if (inserted)
      blocks.push_back({rows[i].block, rows[i].arm, stats[i]});
    else
      blocks[it->second].stats.Add(stats[i]);
  }
  return blocks;
}

JudgedGroup Judge(const std::vector<GroupBlock>& blocks, const JudgeOptions& options,
                  std::string job) {
  JudgedGroup g;
  g.job = std::move(job);
  for (const auto& b : blocks) {
    (b.arm == Arm::kControlled ? g.controlled_blocks : g.uncontrolled_blocks) += 1;
  }
  if (g.controlled_blocks < 2 || g.uncontrolled_blocks < 2) {
    g.notes.push_back(
        fmt::format("{} controlled and {} uncontrolled blocks: at least 2 of each "
                    "are needed for an interval",
                    g.controlled_blocks, g.uncontrolled_blocks));
    return g;
  }
  for (const auto& def : Metrics(options)) {
    std::vector<double> c, u;
    bool defined = true;
    for (const auto& b : blocks) {
      const auto v = def.value(b.stats);
      if (!v) {
        defined = false;
        break;
      }
      (b.arm == Arm::kControlled ? c : u).push_back(*v);
    }
    if (!defined) {
      g.notes.push_back(fmt::format("{} left out: {}", def.name, def.why));
      continue;
    }
    g.metrics.push_back({def.name, EstimateEffect(c, u, options.effect)});
  }
  return g;
}

}  // namespace

Result<PilotReport> JudgePilot(const std::vector<BlockRow>& rows,
                               const std::vector<BlockStats>& stats, const JudgeOptions& options) {
  PilotReport report;
  report.options = options;
  const auto blocks = Gather(rows, stats, nullptr);
  report.all = Judge(blocks, options, "");
  if (report.all.metrics.empty() &&
      (report.all.controlled_blocks < 2 || report.all.uncontrolled_blocks < 2)) {
    return Error::Input(fmt::format(
        "BLOCKS.csv has {} controlled and {} uncontrolled block(s): at least 2 of each are "
        "needed",
        report.all.controlled_blocks, report.all.uncontrolled_blocks));
  }
  const auto defs = Metrics(options);
  double min_s = 0.0, max_s = 0.0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    JudgedBlock jb{blocks[i].block, blocks[i].arm, blocks[i].stats.duration_s, {}};
    for (const auto& def : defs) jb.values.emplace_back(def.name, def.value(blocks[i].stats));
    min_s = i == 0 ? jb.duration_s : std::min(min_s, jb.duration_s);
    max_s = i == 0 ? jb.duration_s : std::max(max_s, jb.duration_s);
    report.blocks.push_back(std::move(jb));
  }
  if (max_s > min_s * 1.01) {
    report.warnings.push_back(fmt::format(
        "blocks last from {:.6g} s to {:.6g} s: energy, cost and carbon per block compare "
        "blocks of equal length only",
        min_s, max_s));
  }
  std::vector<std::string> jobs;
  for (const auto& r : rows) {
    if (!r.job.empty() && std::find(jobs.begin(), jobs.end(), r.job) == jobs.end()) {
      jobs.push_back(r.job);
    }
  }
  for (const auto& job : jobs) {
    report.jobs.push_back(Judge(Gather(rows, stats, &job), options, job));
  }
  return report;
}

}  // namespace headroom::pilot
