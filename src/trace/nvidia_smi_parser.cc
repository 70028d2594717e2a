// Raw nvidia-smi logs (trace/row_parser.h).
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "trace/row_parser.h"

namespace headroom::trace::detail {
namespace {
// Raw nvidia-smi CSV: "timestamp, index, power.draw [W], ..." with units in the values.

// "YYYY/MM/DD HH:MM:SS[.fraction]" (or with '-') -> nanoseconds since 1970-01-01 (no zone).
std::optional<int64_t> ParseTimestampNs(std::string_view s) {
  size_t i = 0;
  const auto number = [&](size_t digits, int& out) {
    if (i + digits > s.size()) return false;
    out = 0;
    for (size_t k = 0; k < digits; ++k) {
      const char c = s[i + k];
      if (c < '0' || c > '9') return false;
      out = out * 10 + (c - '0');
    }
    i += digits;
    return true;
  };
  const auto expect = [&](std::string_view options) {
    if (i < s.size() && options.find(s[i]) != std::string_view::npos) {
      ++i;
      return true;
    }
    return false;
  };
  int year, month, day, hour, minute, second;
  if (!number(4, year) || !expect("/-") || !number(2, month) || !expect("/-") || !number(2, day) ||
      !expect(" T") || !number(2, hour) || !expect(":") || !number(2, minute) || !expect(":") ||
      !number(2, second)) {
    return std::nullopt;
  }
  int64_t fraction_ns = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    int64_t scale = 100'000'000;
    const size_t begin = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      fraction_ns += (s[i] - '0') * scale;
      scale /= 10;
      ++i;
    }
    if (i == begin) return std::nullopt;
  }
  if (i != s.size()) return std::nullopt;
  const std::chrono::year_month_day date{std::chrono::year{year},
                                         std::chrono::month{static_cast<unsigned>(month)},
                                         std::chrono::day{static_cast<unsigned>(day)}};
  if (!date.ok() || hour > 23 || minute > 59 || second > 60) return std::nullopt;
  const int64_t days = std::chrono::sys_days(date).time_since_epoch().count();
  const int64_t seconds = ((days * 24 + hour) * 60 + minute) * 60 + second;
  // From 1970 to 2262-04-11 (what int64 nanoseconds reach): any two then differ by an int64.
  constexpr int64_t kMaxS = std::numeric_limits<int64_t>::max() / 1'000'000'000 - 1;
  if (seconds > kMaxS || seconds < 0) return std::nullopt;
  return seconds * 1'000'000'000 + fraction_ns;
}

class NvidiaSmiParser final : public RowParser {
 public:
  enum class Role : uint8_t { kIgnore, kTimestamp, kIndex, kPower, kUtil, kSmClock };

  using RowParser::RowParser;

  std::optional<std::string> Configure(const std::vector<std::string>& names, bool* needs_gpus) {
    set_column_names(names);
    // Match on the name without its unit: "power.draw [W]" -> "power.draw".
    std::vector<std::string> keys;
    for (const auto& name : names) keys.push_back(name.substr(0, name.find(" [")));
    const auto find = [&](std::string_view key) -> int {
      for (size_t i = 0; i < keys.size(); ++i) {
        if (keys[i] == key) return static_cast<int>(i);
      }
      return -1;
    };
    roles_.assign(names.size(), Role::kIgnore);
    const int timestamp = find("timestamp");
    int power = find("power.draw");
    if (power < 0) power = find("power.draw.average");
    if (power < 0) power = find("power.draw.instant");
    if (timestamp < 0) return "missing column 'timestamp' (nvidia-smi --query-gpu=timestamp,...)";
    if (power < 0) return "missing column 'power.draw [W]' (nvidia-smi --query-gpu=...,power.draw)";
    roles_[static_cast<size_t>(timestamp)] = Role::kTimestamp;
    roles_[static_cast<size_t>(power)] = Role::kPower;
    const int index = find("index");
    if (index >= 0) roles_[static_cast<size_t>(index)] = Role::kIndex;
    int util = find("utilization.gpu");
    if (util >= 0) {
      roles_[static_cast<size_t>(util)] = Role::kUtil;
      summary_.schema.has_field.set(FieldIndex(Field::kUtilPct));
    }
    int clock = find("clocks.sm");
    if (clock < 0) clock = find("clocks.current.sm");
    if (clock >= 0) {
      roles_[static_cast<size_t>(clock)] = Role::kSmClock;
      summary_.schema.has_field.set(FieldIndex(Field::kSmClockMhz));
    }
    has_index_ = index >= 0;
    *needs_gpus = !has_index_;
    return std::nullopt;
  }

  bool ParseLines(const char* begin, const char* end) override {
    double fields[kFieldCount];
    std::fill(std::begin(fields), std::end(fields), kNaN);
    return ForEachLine(begin, end, [&](const char*& p, const char* line_begin) {
      int64_t ns = 0;
      double power_w = kNaN;
      GpuToken gpu;
      size_t t_column = 0;
      size_t gpu_col = 0;
      fields[FieldIndex(Field::kUtilPct)] = kNaN;
      fields[FieldIndex(Field::kSmClockMhz)] = kNaN;
      for (size_t col = 0; col < roles_.size(); ++col) {
        if (col > 0 && !Separator(p, col)) return false;
        switch (roles_[col]) {
          case Role::kTimestamp: {
            t_column = col;
            const char* field_end = FieldEnd(p);
            if (!TextField(p, field_end, col)) return false;
            const std::string text = UnquotedField(p, field_end);
            const auto parsed = ParseTimestampNs(text);
            if (!parsed) {
              return Fail(col, fmt::format("bad timestamp '{}' (expected YYYY/MM/DD "
                                           "HH:MM:SS.mmm)",
                                           FieldText(p)));
            }
            ns = *parsed;
            p = field_end;
            break;
          }
          case Role::kIndex:
            if (!GpuField(p, col, gpu)) return false;
            gpu_col = col;
            break;
          case Role::kPower:
            if (NotAvailable(p)) return Fail(col, "power not available ('[N/A]')");
            if (!Number(p, col, power_w, /*required=*/true, /*unit_suffix=*/true)) return false;
            if (!PowerInBounds(power_w, col)) return false;
            break;
          case Role::kUtil:
          case Role::kSmClock: {
            double& v = fields[FieldIndex(roles_[col] == Role::kUtil ? Field::kUtilPct
                                                                     : Field::kSmClockMhz)];
            if (NotAvailable(p)) {
              const char* field_end = FieldEnd(p);
              if (!TextField(p, field_end, col)) return false;
              p = field_end;
              v = kNaN;
              break;
            }
            if (!Number(p, col, v, /*required=*/false, /*unit_suffix=*/true)) return false;
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
      if (!has_index_) {
        gpu.numeric = true;
        gpu.number =
            static_cast<uint32_t>(summary_.rows % static_cast<uint64_t>(options_.gpus_per_poll));
      }
      if (!origin_ns_) origin_ns_ = ns;
      const double t_s = static_cast<double>(ns - *origin_ns_) / kNanosPerSecond;
      const int64_t known = FindGpu(gpu);
      if (!CheckTime(known, t_s, t_column) || !GpuFits(known, gpu_col)) return false;
      Emit(InternGpu(gpu, known), t_s, power_w, fields, SampleBatch::kNoPhase);
      ++summary_.rows;
      return true;
    });
  }

 private:
  static bool NotAvailable(const char* p) {
    const char* q = SkipBlanks(p);
    return *q == '[' || (q[0] == 'N' && q[1] == '/' && q[2] == 'A');
  }

  std::vector<Role> roles_;
  bool has_index_ = false;
  std::optional<int64_t> origin_ns_;
};

}  // namespace

MadeParser MakeNvidiaSmiParser(std::string_view name, const ReadOptions& options, SampleSink& sink,
                               ReadSummary& summary, const std::vector<std::string>& names) {
  auto parser = std::make_unique<NvidiaSmiParser>(name, options, sink, summary);
  MadeParser made;
  made.error = parser->Configure(names, &made.needs_gpus);
  if (!made.error) {
    parser->StartBatches();
    made.parser = std::move(parser);
  }
  return made;
}

}  // namespace headroom::trace::detail
