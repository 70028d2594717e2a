// Parsing of decimal numbers in trace fields: the hot path of every trace reader.
//
// ParsePlainDecimal handles the text nearly every trace holds -- "123", "-4.56" with at most 15
// significant digits and no exponent -- by Clinger's fast path: the digits form an integer
// m < 10^15 < 2^53 that a double holds exactly, as does 10^f for f <= 15, so m / 10^f in IEEE
// arithmetic is the correctly rounded value. Everything else goes to fast_float
// (ParseDouble), also correctly rounded; both give the value std::strtod would.
#pragma once

#include <fast_float/fast_float.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace headroom::trace {

inline constexpr double kExactPowersOfTen[] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                               1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
inline constexpr int kMaxPlainDigits = 15;

inline bool IsDigit(char c) { return static_cast<unsigned>(c - '0') < 10u; }

// Parses [-]digits[.digits] at `p`. Returns the first byte after the number, or nullptr when
// the text is not such a plain decimal (no digits, more than 15 digits, an exponent follows).
// REQUIRES: the number is followed by a byte that is not a digit (a sentinel such as ',', '\n'
// or '\0'), so the scan needs no end pointer.
// (A SWAR variant reading eight bytes at a time was measured slower on trace-sized numbers.)
[[gnu::always_inline]] inline const char* ParsePlainDecimal(const char* p, double& out) {
  const bool negative = *p == '-';
  p += negative;
  uint64_t mantissa = 0;
  const char* const digits_begin = p;
  while (IsDigit(*p)) {
    mantissa = mantissa * 10 + static_cast<unsigned>(*p - '0');
    ++p;
  }
  int digits = static_cast<int>(p - digits_begin);
  int fraction_digits = 0;
  if (*p == '.') {
    ++p;
    const char* const fraction_begin = p;
    while (IsDigit(*p)) {
      mantissa = mantissa * 10 + static_cast<unsigned>(*p - '0');
      ++p;
    }
    fraction_digits = static_cast<int>(p - fraction_begin);
    digits += fraction_digits;
  }
  if (digits == 0 || digits > kMaxPlainDigits || *p == 'e' || *p == 'E') return nullptr;
  double value = static_cast<double>(mantissa);
  if (fraction_digits > 0) value /= kExactPowersOfTen[fraction_digits];
  out = negative ? -value : value;
  return p;
}

// The value of a plain decimal from its digits: `mantissa` (all digits as one integer, < 10^15)
// and the number of digits after the point -- the value ParsePlainDecimal gives for that text.
// Power readings (at most two decimals, below 1310.72) are looked up in a table of k / 100,
// built with the same correctly rounded division: m / 10 and m / 1 are (10 m) / 100 and
// (100 m) / 100 as real numbers, so they round to the same double. Anything else divides.
inline constexpr size_t kHundredthsTableSize = size_t{1} << 17;
const double* HundredthsTable();

[[gnu::always_inline]] inline double PlainDecimalValue(uint64_t mantissa, size_t fraction_digits,
                                                       const double* hundredths) {
  static constexpr uint64_t kToHundredths[3] = {100, 10, 1};
  if (fraction_digits <= 2) {
    const uint64_t k = mantissa * kToHundredths[fraction_digits];
    if (k < kHundredthsTableSize) return hundredths[k];
  }
  return static_cast<double>(mantissa) / kExactPowersOfTen[fraction_digits];
}

// Parses any number std::strtod accepts in the C locale without leading blanks (also "inf",
// "nan", exponents, long mantissas) within [p, end). Returns the first byte after it, or nullptr.
// The value may be inf or nan (callers check).
inline const char* ParseDouble(const char* p, const char* end, double& out) {
  const auto result = fast_float::from_chars(p, end, out);
  if (result.ec != std::errc()) return nullptr;
  return result.ptr;
}

// A whole CSV field (blanks around it allowed) as a finite number, or nothing.
inline std::optional<double> ParseFieldNumber(std::string_view field) {
  while (!field.empty() && (field.front() == ' ' || field.front() == '\t')) field.remove_prefix(1);
  while (!field.empty() && (field.back() == ' ' || field.back() == '\t')) field.remove_suffix(1);
  if (field.empty()) return std::nullopt;
  double v = 0.0;
  const char* end = field.data() + field.size();
  if (ParseDouble(field.data(), end, v) != end || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace headroom::trace
