#include "common/duration.h"

#include <gtest/gtest.h>

namespace headroom {
namespace {

TEST(ParseDurationS, UnitsScaleToSeconds) {
  EXPECT_DOUBLE_EQ(*ParseDurationS("0.5s"), 0.5);
  EXPECT_DOUBLE_EQ(*ParseDurationS("30s"), 30.0);
  EXPECT_DOUBLE_EQ(*ParseDurationS("5min"), 300.0);
  EXPECT_DOUBLE_EQ(*ParseDurationS("1h"), 3600.0);
  EXPECT_DOUBLE_EQ(*ParseDurationS("500ms"), 0.5);
  EXPECT_DOUBLE_EQ(*ParseDurationS(" 2 "), 2.0);  // bare number: seconds
}

TEST(ParseDurationS, RejectsBadText) {
  for (const char* bad : {"0s", "-1s", "5m", "abc", "", "s", "1e400s", "nan"}) {
    auto r = ParseDurationS(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().kind(), ErrorKind::kUsage) << bad;
  }
  EXPECT_NE(ParseDurationS("5m").error().message().find("unknown unit 'm'"), std::string::npos);
}

TEST(ParseDurationS, NumbersArePlainDecimals) {
  for (const char* bad : {"infs", "inf", "nans", "-infs", "0x10s", "0x10", "1e999s", " s"}) {
    EXPECT_FALSE(ParseDurationS(bad).ok()) << bad;
  }
  EXPECT_DOUBLE_EQ(*ParseDurationS("2.5e1s"), 25.0);
}

TEST(ParseDurationS, BareNumbersCanBeRefused) {
  EXPECT_DOUBLE_EQ(*ParseDurationS("2", BareNumber::kSeconds), 2.0);  // the default
  auto r = ParseDurationS("0.5", BareNumber::kRefused);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind(), ErrorKind::kUsage);
  EXPECT_NE(r.error().message().find("give a unit"), std::string::npos);
  EXPECT_DOUBLE_EQ(*ParseDurationS("0.5s", BareNumber::kRefused), 0.5);
  EXPECT_FALSE(ParseDurationListS("1s,2", BareNumber::kRefused).ok());
  EXPECT_EQ(ParseDurationListS("1s,2", BareNumber::kSeconds)->size(), 2u);
}

TEST(ParseDurationListS, SplitsOnCommas) {
  const auto r = ParseDurationListS("0.5s,30s,5min");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<double>{0.5, 30.0, 300.0}));
  EXPECT_FALSE(ParseDurationListS("").ok());
  EXPECT_FALSE(ParseDurationListS("1s,,2s").ok());
}

TEST(FormatDurationS, PicksTheNaturalUnit) {
  EXPECT_EQ(FormatDurationS(0.5), "0.5s");
  EXPECT_EQ(FormatDurationS(0.25), "0.25s");
  EXPECT_EQ(FormatDurationS(30), "30s");
  EXPECT_EQ(FormatDurationS(90), "90s");
  EXPECT_EQ(FormatDurationS(300), "5min");
  EXPECT_EQ(FormatDurationS(3600), "1h");
  EXPECT_EQ(FormatDurationS(7200), "2h");
  EXPECT_EQ(FormatDurationS(5400), "90min");
}

}  // namespace
}  // namespace headroom
