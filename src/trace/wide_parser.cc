// The wide format (trace/row_parser.h).
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "trace/row_parser.h"

namespace headroom::trace::detail {
namespace {
// Wide format: t_s plus p<i>_w per GPU (util<i>_pct read when present; other columns ignored).

class WideParser final : public RowParser {
 public:
  enum class Role : uint8_t { kIgnore, kTime, kPower, kUtil };
  struct Column {
    Role role = Role::kIgnore;
    uint32_t gpu = 0;  // dense index
  };

  using RowParser::RowParser;

  std::optional<std::string> Configure(const std::vector<std::string>& names) {
    set_column_names(names);
    bool has_t = false;
    std::vector<uint32_t> gpu_numbers;
    for (const auto& name : names) {
      if (name == "t_s") has_t = true;
      if (auto n = MatchNumbered(name, "p", "_w")) gpu_numbers.push_back(*n);
    }
    if (!has_t) return "missing column 't_s' (wide format: t_s, p0_w, p1_w, ...)";
    if (gpu_numbers.empty()) return "no power columns p<i>_w (wide format: t_s, p0_w, p1_w, ...)";
    if (gpu_numbers.size() > options_.max_gpus) {
      return fmt::format("{} power columns: {}", gpu_numbers.size(),
                         TooManyGpusText(options_.max_gpus));
    }
    for (const auto& name : names) {
      Column c;
      if (name == "t_s") {
        c.role = Role::kTime;
      } else if (auto n = MatchNumbered(name, "p", "_w")) {
        c.role = Role::kPower;
        c.gpu = InternGpu(GpuToken{true, *n, {}});
      } else if (auto u = MatchNumbered(name, "util", "_pct")) {
        const auto it = std::find(gpu_numbers.begin(), gpu_numbers.end(), *u);
        if (it != gpu_numbers.end()) {
          c.role = Role::kUtil;
          c.gpu = InternGpu(GpuToken{true, *u, {}});
          summary_.schema.has_field.set(FieldIndex(Field::kUtilPct));
        }
      }
      columns_.push_back(c);
    }
    const size_t gpus = summary_.schema.gpu_ids.size();
    if (gpus != gpu_numbers.size()) return "duplicate power column p<i>_w";
    power_.resize(gpus);
    util_.resize(gpus);
    return std::nullopt;
  }

  bool ParseLines(const char* begin, const char* end) override {
    double fields[kFieldCount];
    std::fill(std::begin(fields), std::end(fields), kNaN);
    return ForEachLine(begin, end, [&](const char*& p, const char* line_begin) {
      std::fill(power_.begin(), power_.end(), kNaN);
      std::fill(util_.begin(), util_.end(), kNaN);
      double t_s = kNaN;
      size_t t_column = 0;
      for (size_t col = 0; col < columns_.size(); ++col) {
        if (col > 0 && !Separator(p, col)) return false;
        const Column c = columns_[col];
        switch (c.role) {
          case Role::kTime:
            t_column = col;
            if (!Number(p, col, t_s, /*required=*/true)) return false;
            break;
          case Role::kPower: {
            double& v = power_[c.gpu];
            if (!Number(p, col, v, /*required=*/false)) return false;
            if (!PowerInBounds(v, col)) return false;
            break;
          }
          case Role::kUtil: {
            double& v = util_[c.gpu];
            if (!Number(p, col, v, /*required=*/false)) return false;
            if (!NonNegative(v)) return Fail(col, fmt::format("negative value {}", v));
            break;
          }
          case Role::kIgnore: {
            const char* field_end = FieldEnd(p);
            if (!TextField(p, field_end, col)) return false;
            p = field_end;
            break;
          }
        }
      }
      if (!EndOfLine(p, line_begin)) return false;
      for (uint32_t g = 0; g < power_.size(); ++g) {
        if (!std::isnan(power_[g]) && !CheckTime(g, t_s, t_column)) return false;
      }
      for (uint32_t g = 0; g < power_.size(); ++g) {
        if (std::isnan(power_[g])) continue;
        fields[FieldIndex(Field::kUtilPct)] = util_[g];
        Emit(g, t_s, power_[g], fields, SampleBatch::kNoPhase);
      }
      ++summary_.rows;
      return true;
    });
  }

 private:
  std::vector<Column> columns_;
  std::vector<double> power_, util_;
};

}  // namespace

MadeParser MakeWideParser(std::string_view name, const ReadOptions& options, SampleSink& sink,
                          ReadSummary& summary, const std::vector<std::string>& names) {
  return Configured(std::make_unique<WideParser>(name, options, sink, summary), names);
}

}  // namespace headroom::trace::detail
