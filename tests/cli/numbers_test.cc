// The one parser of every numeric option: strict plain decimals, finite ranges, one-line
// messages; and its CLI11 validators on a real CLI::App.
#include "cli/numbers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>

namespace headroom::cli {
namespace {

using ::testing::HasSubstr;

TEST(ParseReal, AcceptsPlainDecimals) {
  EXPECT_DOUBLE_EQ(*ParseReal("0.5", 0, 1), 0.5);
  EXPECT_DOUBLE_EQ(*ParseReal("+3", 0, 10), 3.0);
  EXPECT_DOUBLE_EQ(*ParseReal("-2.25", -10, 10), -2.25);
  EXPECT_DOUBLE_EQ(*ParseReal("2.5e3", 0, 1e4), 2500.0);
  EXPECT_DOUBLE_EQ(*ParseReal("1E-3", 0, 1), 0.001);
  EXPECT_DOUBLE_EQ(*ParseReal("010", 0, 100), 10.0);
  EXPECT_DOUBLE_EQ(*ParseReal("60", 0.01, 60), 60.0);  // bounds are inclusive
  EXPECT_DOUBLE_EQ(*ParseReal("1e-999", 0, 1), 0.0);   // underflow is 0
}

TEST(ParseReal, RefusesEverythingElseInOneLine) {
  for (const char* bad :
       {"nan",  "NaN", "inf", "-inf", "infinity", "0x10", "0b1", "",    " 1",    "1 ",
        "1abc", ".5",  "5.",  "1e",   "1e+",      "--1",  "+-1", "1,5", "1e999", "\n1"}) {
    auto r = ParseReal(bad, 0.01, 60);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().kind(), ErrorKind::kUsage);
    EXPECT_THAT(r.error().message(), HasSubstr("[0.01, 60]")) << bad;
    EXPECT_EQ(r.error().message().find('\n'), std::string::npos) << bad;
  }
  EXPECT_EQ(ParseReal("nan", 0.01, 60).error().message(), "'nan' is not a number in [0.01, 60]");
  EXPECT_EQ(ParseReal("1e308", 1, 10000).error().message(), "'1e308' is out of range [1, 10000]");
  EXPECT_EQ(ParseReal("1e999", 1, 10000).error().message(), "'1e999' is out of range [1, 10000]");
}

TEST(ParseReal, BoundsPrintShortest) {
  const std::string m = ParseReal("x", 0.1, 1e9).error().message();
  EXPECT_EQ(m, "'x' is not a number in [0.1, 1000000000]");
  EXPECT_EQ(ParseReal("x", 1e-7, 1).error().message(), "'x' is not a number in [1e-07, 1]");
}

TEST(ParseInteger, StrictAndBounded) {
  EXPECT_EQ(*ParseInteger("16", 1, 100), 16);
  EXPECT_EQ(*ParseInteger("+4", 1, 100), 4);
  EXPECT_EQ(*ParseInteger("0", 0, 100), 0);
  EXPECT_EQ(*ParseInteger("-0", 0, 100), 0);
  EXPECT_EQ(*ParseInteger("4294967295", 0, 4294967295), 4294967295);
  for (const char* bad :
       {"0.5", "1e3", "0x10", "nan", "", "-", "12a", "99999999999999999999", "010", "+08"}) {
    EXPECT_FALSE(ParseInteger(bad, 1, 100).ok()) << bad;
  }
  EXPECT_EQ(ParseInteger("0.5", 1, 4096).error().message(), "'0.5' is not an integer in [1, 4096]");
  EXPECT_EQ(ParseInteger("-1", 1, 4096).error().message(), "'-1' is out of range [1, 4096]");
  EXPECT_EQ(ParseInteger("010", 1, 4096).error().message(),
            "'010' is not an integer in [1, 4096] (a leading zero reads as octal)");
}

TEST(QuoteForMessage, EscapesControlBytesAndTruncates) {
  EXPECT_EQ(QuoteForMessage(std::string("a\0b\n", 4)), "'a\\x00b\\x0a'");
  EXPECT_EQ(QuoteForMessage(std::string(50, 'x')), "'" + std::string(40, 'x') + "...'");
}

TEST(Windows, NeedAUnitAndARange) {
  EXPECT_EQ(ParseWindowListS("--windows", "0.5s,30s,5min")->size(), 3u);
  EXPECT_DOUBLE_EQ(*ParseWindowS("--risk-window", "30s"), 30.0);
  auto bare = ParseWindowListS("--windows", "0.5");
  ASSERT_FALSE(bare.ok());
  EXPECT_THAT(bare.error().message(), HasSubstr("--windows: bad duration '0.5': give a unit"));
  EXPECT_FALSE(ParseWindowS("--risk-window", "30").ok());
  EXPECT_FALSE(ParseWindowS("--risk-window", "30s,1min").ok());
  EXPECT_FALSE(ParseWindowListS("--windows", "nans").ok());
  EXPECT_FALSE(ParseWindowListS("--windows", "infs").ok());
  EXPECT_FALSE(ParseWindowListS("--windows", "0x10s").ok());
  EXPECT_FALSE(ParseWindowListS("--windows", "0.1ms").ok());  // below 1 ms
  EXPECT_FALSE(ParseWindowListS("--windows", "31d").ok());
  EXPECT_FALSE(ParseWindowListS("--windows", "1000h").ok());  // above 30 days
}

// The validators on a real app: checked before CLI11 converts, the type kept in --help.
class Validators : public ::testing::Test {
 protected:
  void SetUp() override {
    app_.add_option("--interval-s", interval_s_, "Interval")->check(Real(0.01, 60.0));
    app_.add_option("--seed", seed_, "Seed")->check(Integer(0, 4294967295));
    app_.add_option("--budget-w", budget_w_, "Budget")->check(Real(1, 10000));
    app_.add_option("--count", count_, "Count")->check(Integer(1, 100));
  }
  // The error text, or "" when the parse succeeds.
  std::string Parse(std::vector<std::string> args) {
    std::reverse(args.begin(), args.end());  // CLI11 takes them reversed
    try {
      app_.parse(args);
    } catch (const CLI::ParseError& e) {
      return e.what();
    }
    return "";
  }
  CLI::App app_{"test"};
  double interval_s_ = 0.5;
  uint64_t seed_ = 1;
  std::optional<double> budget_w_;
  int count_ = 1;
};

TEST_F(Validators, MessageNamesTheFlagOnOneLine) {
  EXPECT_EQ(Parse({"--interval-s", "nan"}), "--interval-s: 'nan' is not a number in [0.01, 60]");
  EXPECT_EQ(Parse({"--budget-w", "1e308"}), "--budget-w: '1e308' is out of range [1, 10000]");
  EXPECT_EQ(Parse({"--seed", "0x10"}), "--seed: '0x10' is not an integer in [0, 4294967295]");
  EXPECT_EQ(Parse({"--count", ""}), "--count: '' is not an integer in [1, 100]");
  EXPECT_EQ(Parse({"--seed", "-1"}), "--seed: '-1' is out of range [0, 4294967295]");
  EXPECT_THAT(Parse({"--seed", "010"}), HasSubstr("leading zero"));  // CLI11 reads octal 8
}

TEST_F(Validators, GoodValuesConvert) {
  EXPECT_EQ(
      Parse({"--interval-s", "2.5e-1", "--seed", "10", "--budget-w", "+300", "--count", "+7"}), "");
  EXPECT_DOUBLE_EQ(interval_s_, 0.25);
  EXPECT_EQ(seed_, 10u);
  EXPECT_DOUBLE_EQ(*budget_w_, 300.0);
  EXPECT_EQ(count_, 7);
}

TEST_F(Validators, HelpShowsTypeAndRange) {
  const std::string help = app_.help();
  EXPECT_THAT(help, HasSubstr("--interval-s FLOAT:[0.01, 60]"));
  EXPECT_THAT(help, HasSubstr("--seed UINT:[0, 4294967295]"));
  EXPECT_THAT(help, HasSubstr("--count INT:[1, 100]"));
}

}  // namespace
}  // namespace headroom::cli
