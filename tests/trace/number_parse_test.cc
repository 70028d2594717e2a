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

}  // namespace
}  // namespace headroom::trace
