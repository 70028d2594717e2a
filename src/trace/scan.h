// Field scanning for the trace parsers (internal to trace/): the byte-level helpers every row
// parser shares. Inside ParseLines every line ends with '\n', so scanning stops there at the
// latest and never needs the chunk end.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trace/number_parse.h"
#include "trace/reader.h"

namespace headroom::trace::detail {
// Field scanning. Inside ParseLines every line ends with '\n', so scanning stops there at the
// latest and never needs the chunk end.

constexpr size_t kReadChunkBytes = size_t{256} << 10;
constexpr size_t kMaxQuotedFieldInMessage = 40;
constexpr uint32_t kMaxDirectGpuNumber = 1 << 16;
constexpr size_t kMaxPhases = SampleBatch::kNoPhase;
constexpr double kNanosPerSecond = 1e9;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The fast path takes powers of at most this many integer digits, all below kMaxPowerW: one
// compare per row for the power bound. Anything longer (10000 itself, 1e308 written out) takes
// the checked path, which compares the value.
constexpr size_t kMaxFastPowerIntegerDigits = 4;
static_assert(kMaxPowerW >= 9999.99999999999 && kMaxPowerW < 1e5,
              "kMaxFastPowerIntegerDigits assumes a bound of five integer digits");

inline bool IsFieldEnd(char c) { return c == ',' || c == '\n' || c == '\r'; }

inline const char* SkipBlanks(const char* p) {
  while (*p == ' ' || *p == '\t') ++p;
  return p;
}

// The end of the field starting at p: the next ',' or end of line outside quotes.
inline const char* FieldEnd(const char* p) {
  bool quoted = false;
  while (true) {
    const char c = *p;
    if (c == '\n') return p;
    if (c == '"') quoted = !quoted;
    if (!quoted && (c == ',' || c == '\r')) return p;
    ++p;
  }
}

// A field's text for a message: at most kMaxQuotedFieldInMessage bytes, control bytes as \xNN.
inline std::string FieldText(const char* p) {
  const char* const end = FieldEnd(p);
  std::string text;
  for (const char* q = p; q < end && q - p < static_cast<ptrdiff_t>(kMaxQuotedFieldInMessage);
       ++q) {
    const auto c = static_cast<unsigned char>(*q);
    if (c < 0x20 || c == 0x7f) {
      fmt::format_to(std::back_inserter(text), "\\x{:02x}", c);
    } else {
      text += *q;
    }
  }
  if (end - p > static_cast<ptrdiff_t>(kMaxQuotedFieldInMessage)) text += "...";
  return text;
}

// The first byte of [begin, end) that no field may hold: a control byte other than tab (a
// blank), or DEL; nullptr when there is none. Line endings end fields before they get here.
inline const char* FindControlByte(const char* begin, const char* end) {
  for (const char* p = begin; p < end; ++p) {
    const auto c = static_cast<unsigned char>(*p);
    if ((c < 0x20 && c != '\t') || c == 0x7f) [[unlikely]] {
      return p;
    }
  }
  return nullptr;
}

inline std::string ControlByteReason(const char* byte) {
  return fmt::format("control byte 0x{:02x} in the value", static_cast<unsigned char>(*byte));
}

// A field's text without surrounding blanks and quotes ("" inside quotes is one quote).
inline std::string UnquotedField(const char* begin, const char* end) {
  while (begin < end && (*begin == ' ' || *begin == '\t')) ++begin;
  while (end > begin && (end[-1] == ' ' || end[-1] == '\t')) --end;
  if (end - begin >= 2 && *begin == '"' && end[-1] == '"') {
    std::string out;
    for (const char* p = begin + 1; p < end - 1; ++p) {
      out += *p;
      if (*p == '"' && p + 1 < end - 1 && p[1] == '"') ++p;
    }
    return out;
  }
  return std::string(begin, end);
}

inline std::vector<std::string> SplitHeader(std::string_view line) {
  std::string text(line);
  text += '\n';
  std::vector<std::string> names;
  const char* p = text.c_str();
  while (true) {
    const char* end = FieldEnd(p);
    names.push_back(UnquotedField(p, end));
    if (*end != ',') break;
    p = end + 1;
  }
  return names;
}

enum class FieldValue { kNumber, kEmpty, kBad, kNotFinite };

// Parses a numeric field the slow way; `unit_suffix` allows nvidia-smi's " W", " %", " MHz".
[[gnu::noinline]] inline FieldValue NumberFieldSlow(const char*& p, const char* end, double& out,
                                                    bool unit_suffix) {
  const char* q = SkipBlanks(p);
  if (IsFieldEnd(*q)) {
    p = q;
    return FieldValue::kEmpty;
  }
  if (*q == '"') {  // quoted number
    const char* field_end = FieldEnd(q);
    const std::string inner = UnquotedField(q, field_end);
    if (inner.empty()) {
      p = field_end;
      return FieldValue::kEmpty;
    }
    const char* r = ParseDouble(inner.data(), inner.data() + inner.size(), out);
    if (r != inner.data() + inner.size()) return FieldValue::kBad;
    p = field_end;
    return std::isfinite(out) ? FieldValue::kNumber : FieldValue::kNotFinite;
  }
  const char* r = ParseDouble(q, end, out);
  if (r == nullptr) return FieldValue::kBad;
  r = SkipBlanks(r);
  if (unit_suffix) {
    while ((*r >= 'A' && *r <= 'Z') || (*r >= 'a' && *r <= 'z') || *r == '%' || *r == '/') ++r;
    r = SkipBlanks(r);
  }
  if (!IsFieldEnd(*r)) return FieldValue::kBad;
  p = r;
  return std::isfinite(out) ? FieldValue::kNumber : FieldValue::kNotFinite;
}

// Parses a whole numeric field: the plain decimal that fills it, or the slow path for blanks,
// quotes, exponents, units ("69.85 W") and errors.
[[gnu::always_inline]] inline FieldValue NumberField(const char*& p, const char* end, double& out,
                                                     bool unit_suffix) {
  const char* r = ParsePlainDecimal(p, out);
  if (r != nullptr && IsFieldEnd(*r)) [[likely]] {
    p = r;
    return FieldValue::kNumber;
  }
  return NumberFieldSlow(p, end, out, unit_suffix);
}

// A GPU id as written: small non-negative integers take a direct path.
struct GpuToken {
  bool numeric = false;
  uint32_t number = 0;
  std::string name;
  bool empty() const { return !numeric && name.empty(); }
};

// The text of one field remembered with its value: the GPUs of one poll share a timestamp, so
// in a long trace most rows repeat the previous row's t_s to the byte, and comparing up to 16
// bytes is cheaper than parsing them. Exact: equal text, equal value.
class RepeatedField {
 public:
  // If the field at p (followed by its delimiter) is the remembered one, advances p to the
  // delimiter and returns true. REQUIRES: p < end.
  [[gnu::always_inline]] bool Match(const char*& p, const char* end, double& value) const {
    if (length_ == 0 || end - p < 16) return false;
    uint64_t lo, hi;
    std::memcpy(&lo, p, 8);
    std::memcpy(&hi, p + 8, 8);
    if (((lo ^ text_lo_) & mask_lo_) != 0 || ((hi ^ text_hi_) & mask_hi_) != 0) return false;
    p += length_ - 1;  // at the delimiter
    value = value_;
    return true;
  }

  // Remembers the field [begin, delimiter] and its value; fields of 16 bytes or more are not.
  void Remember(const char* begin, const char* delimiter, double value) {
    const size_t length = static_cast<size_t>(delimiter - begin) + 1;
    if (length > 16) {
      length_ = 0;
      return;
    }
    char text[16] = {};
    std::memcpy(text, begin, length);
    std::memcpy(&text_lo_, text, 8);
    std::memcpy(&text_hi_, text + 8, 8);
    mask_lo_ = length >= 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * length)) - 1;
    mask_hi_ = length <= 8    ? 0
               : length == 16 ? ~uint64_t{0}
                              : (uint64_t{1} << (8 * (length - 8))) - 1;
    length_ = length;
    value_ = value;
  }

 private:
  uint64_t text_lo_ = 0, text_hi_ = 0, mask_lo_ = 0, mask_hi_ = 0;
  size_t length_ = 0;  // bytes including the delimiter; 0 = nothing remembered
  double value_ = 0.0;
};

// "p3_w" with prefix "p" and suffix "_w" -> 3.
inline std::optional<uint32_t> MatchNumbered(std::string_view name, std::string_view prefix,
                                             std::string_view suffix) {
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) ||
      !name.ends_with(suffix)) {
    return std::nullopt;
  }
  const std::string_view digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  uint32_t value = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || ptr != digits.data() + digits.size()) return std::nullopt;
  return value;
}

}  // namespace headroom::trace::detail
