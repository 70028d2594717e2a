#include "trace/number_parse.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdlib>
#include <random>
#include <string>

namespace headroom::trace {
namespace {

// The reference is the C library's strtod, independent of both parsing paths.
double Strtod(const std::string& s) { return std::strtod(s.c_str(), nullptr); }

TEST(ParsePlainDecimal, MatchesStrtodOnHandPickedValues) {
  for (const std::string s : {"0", "7", "-3", "69.85", "0.1", "0.30000000000000", "123456.789",
                              "249999.9", "999999999999999", "-0.00000000000001", ".5", "5."}) {
    const std::string text = s + ",";
    double v = -1.0;
    const char* end = ParsePlainDecimal(text.c_str(), v);
    ASSERT_NE(end, nullptr) << s;
    EXPECT_EQ(*end, ',') << s;
    EXPECT_EQ(std::bit_cast<uint64_t>(v), std::bit_cast<uint64_t>(Strtod(s))) << s;
  }
}

TEST(ParsePlainDecimal, DeclinesWhatItCannotDoExactly) {
  double v = 0.0;
  for (const char* s :
       {"1e3,", "1234567890123456,", "nan,", "inf,", "-,", ".,", "abc,", ",", "+1,"}) {
    EXPECT_EQ(ParsePlainDecimal(s, v), nullptr) << s;
  }
}

TEST(ParsePlainDecimal, MatchesStrtodOnRandomDecimals) {
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int> int_digits(0, 9), frac_digits(0, 8), digit(0, 9);
  for (int trial = 0; trial < 200000; ++trial) {
    std::string s;
    if (rng() % 4 == 0) s += '-';
    const int n_int = int_digits(rng) + 1, n_frac = frac_digits(rng);
    for (int i = 0; i < n_int; ++i) s += static_cast<char>('0' + digit(rng));
    if (n_frac > 0) {
      s += '.';
      for (int i = 0; i < n_frac; ++i) s += static_cast<char>('0' + digit(rng));
    }
    const std::string text = s + "\n";
    double v = 0.0;
    const char* end = ParsePlainDecimal(text.c_str(), v);
    if (n_int + n_frac > 15) {  // beyond the exact fast path: declined, left to fast_float
      ASSERT_EQ(end, nullptr) << s;
      continue;
    }
    ASSERT_NE(end, nullptr) << s;
    ASSERT_EQ(std::bit_cast<uint64_t>(v), std::bit_cast<uint64_t>(Strtod(s))) << s;
  }
}

TEST(ParseDouble, HandlesTheGeneralCase) {
  for (const std::string s :
       {"1e3", "-2.5E-3", "12345678901234567890.5", "0.1234567890123456789"}) {
    double v = 0.0;
    const char* end = ParseDouble(s.data(), s.data() + s.size(), v);
    ASSERT_EQ(end, s.data() + s.size()) << s;
    EXPECT_EQ(std::bit_cast<uint64_t>(v), std::bit_cast<uint64_t>(Strtod(s))) << s;
  }
  double v = 0.0;
  const std::string bad = "x1";
  EXPECT_EQ(ParseDouble(bad.data(), bad.data() + bad.size(), v), nullptr);
}

TEST(PlainDecimalValue, MatchesStrtodAcrossTheTableAndBeyond) {
  // Every mantissa of the table with 0, 1 and 2 fraction digits (the table holds k / 100;
  // m and m / 10 are looked up as 100 m / 100 and 10 m / 100), then past its end and with
  // more decimals (divided).
  const double* hundredths = HundredthsTable();
  const auto text = [](uint64_t m, size_t f) {
    std::string digits = std::to_string(m);
    if (f == 0) return digits;
    if (digits.size() <= f) digits.insert(0, f + 1 - digits.size(), '0');
    return digits.substr(0, digits.size() - f) + "." + digits.substr(digits.size() - f);
  };
  for (size_t f = 0; f <= 2; ++f) {
    for (uint64_t m = 0; m < kHundredthsTableSize + 1000; m += (f == 0 ? 7 : 1)) {
      const std::string s = text(m, f);
      ASSERT_EQ(std::bit_cast<uint64_t>(PlainDecimalValue(m, f, hundredths)),
                std::bit_cast<uint64_t>(Strtod(s)))
          << s;
    }
  }
  std::mt19937_64 rng(9);
  std::uniform_int_distribution<uint64_t> mantissa(0, 999999999999999);
  for (int trial = 0; trial < 100000; ++trial) {
    const uint64_t m = mantissa(rng);
    const size_t f = static_cast<size_t>(trial % 16);
    const std::string s = text(m, f);
    ASSERT_EQ(std::bit_cast<uint64_t>(PlainDecimalValue(m, f, hundredths)),
              std::bit_cast<uint64_t>(Strtod(s)))
        << s;
  }
}

}  // namespace
}  // namespace headroom::trace
