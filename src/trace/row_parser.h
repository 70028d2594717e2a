// The row parser every trace format implements, and the parsers (internal to trace/). One per
// format, each in its own file: long_parser.cc, wide_parser.cc, nvidia_smi_parser.cc;
// parser_for_header.cc detects the format and builds the parser.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trace/reader.h"
#include "trace/scan.h"

namespace headroom::trace::detail {

// ---------------------------------------------------------------------------------------------
// Row parsers: one per format. ParseLines parses whole lines and stops at the first bad one,
// leaving the message in error(). A line is validated completely before anything of it is
// committed (GPU ids interned, times recorded, samples batched), so a rejected line leaves the
// parser as it was.

class RowParser {
 public:
  RowParser(std::string_view name, const ReadOptions& options, SampleSink& sink,
            ReadSummary& summary)
      : name_(name), options_(options), sink_(sink), summary_(summary) {}
  virtual ~RowParser() = default;

  // REQUIRES: [begin, end) is whole lines; end[-1] == '\n'.
  virtual bool ParseLines(const char* begin, const char* end) = 0;

  // Sizes the batch for the schema. REQUIRES: called once the header is configured.
  void StartBatches() {
    batch_.Reserve(std::max<size_t>(1, options_.batch_rows), summary_.schema);
    any_field_ = summary_.schema.has_field.any();
  }

  void Flush() {
    if (batch_.size() > 0) {
      summary_.samples += batch_.size();
      sink_.TakeBatch(batch_, summary_.schema);
      batch_.Clear();
    }
  }
  int64_t line_no() const { return line_no_; }
  void set_line_no(int64_t line_no) { line_no_ = line_no; }
  const std::string& error() const { return error_; }
  void set_column_names(std::vector<std::string> names) { column_names_ = std::move(names); }

 protected:
  // A line longer than the limit is reported as that, whatever else is wrong in it, so that the
  // error does not depend on how much of the file was in memory when the line was seen.
  [[gnu::noinline, gnu::cold]] bool Fail(size_t column_index, std::string_view reason) {
    if (LineTooLong()) return FailLine("");
    const std::string_view field =
        column_index < column_names_.size() ? std::string_view(column_names_[column_index]) : "";
    error_ = LocatedMessage(name_, line_no_, static_cast<int>(column_index + 1), field, reason);
    return false;
  }
  [[gnu::noinline, gnu::cold]] bool FailLine(std::string_view reason) {
    if (LineTooLong()) {
      error_ = LocatedMessage(name_, line_no_, 0, "",
                              fmt::format("line longer than {} bytes", options_.max_line_bytes));
      return false;
    }
    error_ = LocatedMessage(name_, line_no_, 0, "", reason);
    return false;
  }
  // Whether the line being parsed, with its newline, is longer than max_line_bytes.
  bool LineTooLong() const {
    if (line_begin_ == nullptr || chunk_end_ == nullptr) return false;
    const auto* nl = static_cast<const char*>(
        std::memchr(line_begin_, '\n', static_cast<size_t>(chunk_end_ - line_begin_)));
    const size_t bytes = static_cast<size_t>((nl != nullptr ? nl + 1 : chunk_end_) - line_begin_);
    return bytes > options_.max_line_bytes;
  }

  // Parses a numeric field. Empty leaves `out` NaN; `required` makes it an error.
  [[gnu::always_inline]] bool Number(const char*& p, size_t column, double& out, bool required,
                                     bool unit_suffix = false) {
    const char* field_begin = p;
    const FieldValue v = NumberField(p, chunk_end_, out, unit_suffix);
    if (v == FieldValue::kNumber) [[likely]] {
      return true;
    }
    if (v == FieldValue::kEmpty) {
      out = kNaN;
      if (!required) return true;
    }
    return NumberError(column, v, field_begin);
  }

  [[gnu::noinline, gnu::cold]] bool NumberError(size_t column, FieldValue v,
                                                const char* field_begin) {
    if (const char* c = FindControlByte(field_begin, FieldEnd(field_begin))) {
      return Fail(column, ControlByteReason(c));
    }
    switch (v) {
      case FieldValue::kEmpty:
        return Fail(column, "missing value");
      case FieldValue::kNotFinite:
        return Fail(column, fmt::format("not a finite number '{}'", FieldText(field_begin)));
      default:
        return Fail(column, fmt::format("unparsable number '{}'", FieldText(field_begin)));
    }
  }

  // Separator before field `column` (> 0).
  [[gnu::always_inline]] bool Separator(const char*& p, size_t column) {
    if (*p == ',') [[likely]] {
      ++p;
      return true;
    }
    return FailLine(
        fmt::format("row has {} fields, the header has {}", column, column_names_.size()));
  }

  [[gnu::always_inline]] bool EndOfLine(const char*& p, const char* line_begin) {
    if (*p == '\r') ++p;
    if (*p != '\n') return ExtraFields(p);
    ++p;
    if (static_cast<size_t>(p - line_begin) > options_.max_line_bytes) {
      return FailLine(fmt::format("line longer than {} bytes", options_.max_line_bytes));
    }
    return true;
  }

  [[gnu::noinline, gnu::cold]] bool ExtraFields(const char* p) {
    const char* nl = p;
    while (*nl != '\n') ++nl;
    if (const char* c = FindControlByte(p, nl)) {
      return FailLine(fmt::format("control byte 0x{:02x} after the last field",
                                  static_cast<unsigned char>(*c)));
    }
    return FailLine(fmt::format("row has more fields than the header's {}", column_names_.size()));
  }

  // A text field (an ignored column, a phase, a timestamp): [p, end) must hold no control byte.
  [[gnu::always_inline]] bool TextField(const char* p, const char* end, size_t column) {
    if (const char* c = FindControlByte(p, end)) [[unlikely]] {
      return Fail(column, ControlByteReason(c));
    }
    return true;
  }

  // Per-GPU power: finite (checked by Number), in [0, kMaxPowerW]. NaN (no sample) passes.
  [[gnu::always_inline]] bool PowerInBounds(double power_w, size_t column) {
    if (power_w < 0.0 || power_w > kMaxPowerW) [[unlikely]] {
      return PowerError(power_w, column);
    }
    return true;
  }
  [[gnu::noinline, gnu::cold]] bool PowerError(double power_w, size_t column) {
    if (power_w < 0.0) return Fail(column, fmt::format("negative power {} W", power_w));
    return Fail(column, fmt::format("power {} W is above {} W, the bound on one GPU's power",
                                    power_w, kMaxPowerW));
  }

  // Runs parse_row(p, line_begin) on every non-blank line of [p, end); parse_row advances p past
  // the line's newline or returns false (error() set).
  template <class ParseRow>
  [[gnu::always_inline]] bool ForEachLine(const char* p, const char* end, ParseRow&& parse_row) {
    chunk_end_ = end;
    while (p < end) {
      ++line_no_;
      const char* const line_begin = p;
      line_begin_ = line_begin;
      if (BlankLine(p)) continue;
      if (!parse_row(p, line_begin)) return false;
    }
    line_begin_ = nullptr;  // the chunk may be unmapped next
    return true;
  }

  static bool BlankLine(const char*& p) {
    if (*p == '\n') {
      ++p;
      return true;
    }
    if (*p == '\r' && p[1] == '\n') {
      p += 2;
      return true;
    }
    return false;
  }

  // Reads a GPU id field.
  [[gnu::always_inline]] bool GpuField(const char*& p, size_t column, GpuToken& token) {
    if (IsDigit(*p)) [[likely]] {  // fast path: a small number filling the field
      uint32_t number = static_cast<uint32_t>(*p - '0');
      const char* q = p + 1;
      while (IsDigit(*q) && q - p < 9) number = number * 10 + static_cast<uint32_t>(*q++ - '0');
      if (IsFieldEnd(*q)) {
        token.numeric = true;
        token.number = number;
        p = q;
        return true;
      }
    }
    return GpuFieldSlow(p, column, token);
  }

  [[gnu::noinline]] bool GpuFieldSlow(const char*& p, size_t column, GpuToken& token) {
    const char* q = SkipBlanks(p);
    uint32_t number = 0;
    const char* digits = q;
    while (static_cast<unsigned>(*q - '0') < 10u && q - digits < 9) {
      number = number * 10 + static_cast<uint32_t>(*q - '0');
      ++q;
    }
    const char* after = SkipBlanks(q);
    if (q > digits && IsFieldEnd(*after)) {
      token.numeric = true;
      token.number = number;
      p = after;
      return true;
    }
    const char* end = FieldEnd(p);
    if (!TextField(p, end, column)) return false;
    token.numeric = false;
    token.name = UnquotedField(p, end);
    p = end;
    if (token.name.empty()) return Fail(column, "missing value");
    return true;
  }

  // The dense index of a GPU, or -1 if not seen yet.
  [[gnu::always_inline]] int64_t FindGpu(const GpuToken& token) const {
    if (token.numeric && token.number < kMaxDirectGpuNumber) [[likely]] {
      return token.number < direct_gpu_.size() ? direct_gpu_[token.number] : -1;
    }
    return FindNamedGpu(token);
  }
  [[gnu::noinline]] int64_t FindNamedGpu(const GpuToken& token) const {
    const auto it = named_gpu_.find(token.numeric ? std::to_string(token.number) : token.name);
    return it == named_gpu_.end() ? int64_t{-1} : static_cast<int64_t>(it->second);
  }

  // Whether a GPU not seen yet (`found` < 0) fits within options_.max_gpus; else the error, on
  // `column`.
  [[gnu::always_inline]] bool GpuFits(int64_t found, size_t column) {
    if (found >= 0 || summary_.schema.gpu_ids.size() < options_.max_gpus) [[likely]] {
      return true;
    }
    return TooManyGpus(column);
  }
  [[gnu::noinline, gnu::cold]] bool TooManyGpus(size_t column) {
    return Fail(column, TooManyGpusText(options_.max_gpus));
  }

  [[gnu::always_inline]] uint32_t InternGpu(const GpuToken& token, int64_t found) {
    if (found >= 0) [[likely]] {
      return static_cast<uint32_t>(found);
    }
    return AddGpu(token);
  }
  uint32_t InternGpu(const GpuToken& token) { return InternGpu(token, FindGpu(token)); }

  [[gnu::noinline]] uint32_t AddGpu(const GpuToken& token) {
    auto& ids = summary_.schema.gpu_ids;
    const auto index = static_cast<uint32_t>(ids.size());
    ids.push_back(token.numeric ? std::to_string(token.number) : token.name);
    last_t_.push_back(-std::numeric_limits<double>::infinity());
    if (token.numeric && token.number < kMaxDirectGpuNumber) {
      if (direct_gpu_.size() <= token.number) direct_gpu_.resize(token.number + 1, -1);
      direct_gpu_[token.number] = index;
    } else {
      named_gpu_.emplace(ids.back(), index);
    }
    return index;
  }

  // Time must be within +-kMaxTimeS and must not go backwards for a GPU. `gpu` < 0: not seen
  // yet.
  [[gnu::always_inline]] bool CheckTime(int64_t gpu, double t_s, size_t column) {
    if (!(t_s >= -kMaxTimeS && t_s <= kMaxTimeS)) [[unlikely]] {
      return Fail(column, fmt::format("time {} s is beyond {} s, the bound on a trace's times "
                                      "(is it in ms or ns?)",
                                      t_s, t_s < 0.0 ? -kMaxTimeS : kMaxTimeS));
    }
    if (gpu >= 0 && t_s < last_t_[static_cast<size_t>(gpu)]) [[unlikely]] {
      return Fail(column, fmt::format("time goes backwards for gpu {}: {} s after {} s",
                                      summary_.schema.gpu_ids[static_cast<size_t>(gpu)], t_s,
                                      last_t_[static_cast<size_t>(gpu)]));
    }
    return true;
  }

  static bool NonNegative(double v) { return !(v < 0.0); }  // NaN (absent) passes

  // Appends one validated sample. `fields` holds kFieldCount values (NaN = absent).
  [[gnu::always_inline]] void Emit(uint32_t gpu, double t_s, double power_w, const double* fields,
                                   uint16_t phase) {
    last_t_[gpu] = t_s;
    const size_t i = batch_.count;
    batch_.gpu[i] = gpu;
    batch_.t_s[i] = t_s;
    batch_.power_w[i] = power_w;
    if (any_field_) {
      const auto& has = summary_.schema.has_field;
      for (size_t f = 0; f < kFieldCount; ++f) {
        if (has.test(f)) batch_.fields[f][i] = fields[f];
      }
    }
    if (summary_.schema.has_phase) batch_.phase[i] = phase;
    if (++batch_.count == batch_.capacity()) Flush();
  }

  std::string_view name_;
  const ReadOptions& options_;
  SampleSink& sink_;
  ReadSummary& summary_;
  std::vector<std::string> column_names_;
  // The fast path's powers before conversion: integer mantissa and fraction digits per sample.
  std::vector<uint64_t> mantissa_;
  std::vector<uint8_t> fraction_digits_;
  const char* chunk_end_ = nullptr;   // end of the lines being parsed
  const char* line_begin_ = nullptr;  // the line being parsed (for errors)
  int64_t line_no_ = 1;               // the header is line 1
  std::string error_;
  SampleBatch batch_;
  bool any_field_ = false;
  std::vector<double> last_t_;  // per dense GPU index

 protected:
  std::vector<int64_t> direct_gpu_;  // GPU number -> dense index (-1: not seen)

 private:
  std::unordered_map<std::string, uint32_t> named_gpu_;
};

// A parser built for a header: the parser, or the reason the header does not fit the format.
struct MadeParser {
  std::unique_ptr<RowParser> parser;
  std::optional<std::string> error;
  bool needs_gpus = false;  // nvidia-smi without an index column: --gpus must say how many
};
// `parser` configured for the header's `names` (its Configure says what does not fit), its
// batches started when it does.
template <class P>
MadeParser Configured(std::unique_ptr<P> parser, const std::vector<std::string>& names) {
  MadeParser made;
  made.error = parser->Configure(names);
  if (!made.error) {
    parser->StartBatches();
    made.parser = std::move(parser);
  }
  return made;
}
MadeParser MakeLongParser(std::string_view name, const ReadOptions& options, SampleSink& sink,
                          ReadSummary& summary, const std::vector<std::string>& names);
MadeParser MakeWideParser(std::string_view name, const ReadOptions& options, SampleSink& sink,
                          ReadSummary& summary, const std::vector<std::string>& names);
MadeParser MakeNvidiaSmiParser(std::string_view name, const ReadOptions& options, SampleSink& sink,
                               ReadSummary& summary, const std::vector<std::string>& names);

// The format of a header's column names (kAuto: none fits).
TraceFormat DetectFormat(const std::vector<std::string>& names);
// The parser for a header line (without its newline), or the error naming file and column.
Result<std::unique_ptr<RowParser>> MakeParser(std::string_view name, std::string_view header,
                                              const ReadOptions& options, SampleSink& sink,
                                              ReadSummary& summary);

}  // namespace headroom::trace::detail
