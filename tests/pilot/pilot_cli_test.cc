// `headroom pilot` through the binary: the JSON keys of the interface, a report on a synthetic
// pilot with a known effect, and bad input as one line with a non-zero exit and nothing written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "../support/binary_test.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Concatenation by appending: g++ 12 warns falsely (-Wrestrict) on "literal" + std::string&&.
template <class... Parts>
std::string Cat(const Parts&... parts) {
  std::string s;
  ((s += parts), ...);
  return s;
}

using headroom::test_support::Outcome;

class PilotCli : public headroom::test_support::BinaryTest {
 protected:
  PilotCli() : BinaryTest("headroom_pilot_cli_") {}
  Outcome Headroom(const std::string& args) { return Run(Cat(HEADROOM_BINARY, " ", args)); }
  // A long-CSV trace of `gpus` GPUs at 1 s for `seconds` s: power varies slowly around
  // `level_w`, `tokens` a row when > 0, scaled by `scale` from `scale_from_s` on.
  std::string Trace(const std::string& name, int seconds, double level_w, double tokens,
                    int gpus = 2) {
    std::string csv = tokens > 0 ? "t_s,gpu,power_w,tokens\n" : "t_s,gpu,power_w\n";
    for (int t = 0; t < seconds; ++t) {
      for (int g = 0; g < gpus; ++g) {
        const double p = level_w + 20.0 * std::sin(t / 7.0 + g) + 10.0 * std::sin(t / 2.3);
        csv += Cat(std::to_string(t), ",", std::to_string(g), ",", std::to_string(p));
        if (tokens > 0) csv += Cat(",", std::to_string(tokens));
        csv += "\n";
      }
    }
    return Write(name, csv);
  }
  static bool OneLine(const std::string& err) {
    return !err.empty() && err.find('\n') == err.size() - 1 &&
           err.rfind("headroom: error: ", 0) == 0;
  }
};

TEST_F(PilotCli, PlanJsonHasTheInterfaceKeys) {
  const std::string base = Trace("base.csv", 3600, 300.0, 100.0);
  const std::string report = (dir_ / "plan.html").string();
  auto r = Headroom(Cat("pilot plan --baseline ", base,
                        " --effect 10% --metric energy --block 2min --json --report ", report));
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"metric", "effect_pct", "alpha", "power", "block_s", "blocks", "days",
                          "autocorrelation_lag1", "gpu_hours_at_risk", "cost_usd"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["metric"], "energy");
  EXPECT_DOUBLE_EQ(j["effect_pct"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(j["block_s"].get<double>(), 120.0);
  EXPECT_EQ(j["blocks"].get<int64_t>() % 2, 0);
  // GPU-hours at risk: the controlled arm (half the blocks) x 2 GPUs x 2 min.
  EXPECT_NEAR(j["gpu_hours_at_risk"].get<double>(),
              j["blocks"].get<double>() / 2.0 * 2.0 * 120.0 / 3600.0, 1e-9);
  EXPECT_NEAR(j["cost_usd"].get<double>(), j["gpu_hours_at_risk"].get<double>() * 3.0, 1e-9);
  EXPECT_THAT(Slurp(report), HasSubstr("<svg"));
  // The text table.
  auto t = Headroom(Cat("pilot plan --baseline ", base, " --effect 10% --block 2min"));
  ASSERT_EQ(t.status, 0) << t.err;  // tokens_per_mwh by default: the trace has tokens
  EXPECT_THAT(t.out, HasSubstr("GPU-hours at risk"));
}

TEST_F(PilotCli, PlanRefusesInOneLine) {
  const std::string base = Trace("base.csv", 600, 300.0, 0.0);
  const std::string report = (dir_ / "plan.html").string();
  struct Case {
    std::string args;
    int status;
    std::string says;
  };
  const Case cases[] = {
      {"--effect 10% --metric energy --block 1d", 2,
       "baseline holds 0 blocks of 24h; at least 8 are needed"},
      {"--effect 10% --metric energy --block 2min", 2, "baseline holds 5 blocks of 2min"},
      {"--effect 10% --block 1min", 2, "needs a tokens column"},
      {"--effect 10% --metric violations --block 1min", 2, "needs a budget"},
      {"--effect 10 --metric energy --block 1min", 2, "--effect: '10' needs its unit"},
      {"--effect 0% --metric energy --block 1min", 2, "--effect"},
      {"--effect 10% --metric watts --block 1min", 2, "--metric: 'watts'"},
      {"--effect 10% --metric energy --block 1", 2, "--block"},
      {"--effect 10% --metric energy --block 1min --alpha 2", 2, "--alpha"},
  };
  for (const auto& c : cases) {
    auto r = Headroom(Cat("pilot plan --baseline ", base, " ", c.args, " --report ", report));
    EXPECT_EQ(r.status, c.status) << c.args << ": " << r.err;
    EXPECT_TRUE(OneLine(r.err)) << c.args << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.says)) << c.args;
    EXPECT_TRUE(r.out.empty()) << c.args;
    EXPECT_FALSE(fs::exists(report)) << c.args;
  }
  auto missing = Headroom(
      Cat("pilot plan --baseline ", (dir_ / "nope.csv").string(), " --effect 10% --metric energy"));
  EXPECT_EQ(missing.status, 1);
  EXPECT_TRUE(OneLine(missing.err)) << missing.err;
  const std::string bad = Write("bad.csv", "t_s,gpu,power_w\n0,0,100\n1,0,abc\n");
  auto r = Headroom(Cat("pilot plan --baseline ", bad, " --effect 10% --metric energy"));
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_THAT(r.err, HasSubstr("bad.csv:3"));
}

TEST_F(PilotCli, ReportRecoversAKnownEffect) {
  // Ten blocks, each its own trace of 2 GPUs: controlled ones at 90 % of the power, tokens the
  // same: energy -10 % (up to the sine's phase), tokens/MWh about +11 %.
  std::string blocks = "block,arm,trace,job\n";
  std::string traces;
  for (int b = 0; b < 10; ++b) {
    const bool controlled = b % 2 == (b / 2) % 2;  // pairs in varying order
    const std::string name = Cat("b", std::to_string(b), ".csv");
    traces += Cat(" ", Trace(name, 300 + b, controlled ? 270.0 : 300.0, 50.0));
    blocks += Cat(std::to_string(b), ",", controlled ? "controlled" : "uncontrolled", ",", name,
                  ",", b < 6 ? "a" : "b", "\n");
  }
  const std::string file = Write("blocks.csv", blocks);
  const std::string report = (dir_ / "report.html").string();
  auto r = Headroom(Cat("pilot report --blocks ", file, " --traces", traces,
                        " --budget-w 300 --json --report ", report));
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* m : {"tokens_per_mwh", "violations_0.5s", "violations_30s", "violations_5min",
                        "energy_mwh", "cost_usd", "carbon_kg"}) {
    ASSERT_TRUE(j["metrics"].contains(m)) << m;
    for (const char* key : {"effect_pct", "effect_ci_pct", "p_value", "controlled_mean",
                            "uncontrolled_mean", "difference_ci"}) {
      EXPECT_TRUE(j["metrics"][m].contains(key)) << m << " " << key;
    }
  }
  const auto& e = j["metrics"]["energy_mwh"];
  EXPECT_NEAR(e["effect_pct"].get<double>(), -10.0, 1.0);
  EXPECT_LT(e["effect_ci_pct"][0].get<double>(), -9.0);
  EXPECT_GT(e["effect_ci_pct"][1].get<double>(), -11.0);
  EXPECT_LT(e["p_value"].get<double>(), 0.05);
  EXPECT_TRUE(e["p_exact"].get<bool>());  // C(10, 5) = 252 relabellings
  ASSERT_EQ(j["jobs"].size(), 2u);
  EXPECT_EQ(j["jobs"][0]["job"], "a");
  EXPECT_THAT(Slurp(report), HasSubstr("energy_mwh"));
  // The same seed, the same figures.
  auto again =
      Headroom(Cat("pilot report --blocks ", file, " --traces", traces, " --budget-w 300 --json"));
  EXPECT_EQ(nlohmann::json::parse(again.out)["metrics"], j["metrics"]);
}

TEST_F(PilotCli, ReportRefusesInOneLine) {
  const std::string a = Trace("a.csv", 100, 300.0, 0.0);
  const std::string report = (dir_ / "r.html").string();
  struct Case {
    std::string blocks;
    int status;
    std::string says;
  };
  const Case cases[] = {
      {"block,arm,trace\n1,controlled,a.csv\n2,treated,a.csv\n", 1, "blocks.csv:3:2: column 'arm'"},
      {"block,arm,trace\n1,controlled,x.csv\n", 1, "blocks.csv:2: column 'trace': 'x.csv' is not"},
      {"block,arm\n1,controlled\n", 1, "no 'trace' column"},
      {"block,arm,trace,start_s,end_s\n1,controlled,a.csv,500,600\n2,uncontrolled,a.csv,0,10\n", 1,
       "no samples"},
      {"block,arm,trace\n1,controlled,a.csv\n2,uncontrolled,a.csv\n", 1,
       "at least 2 of each are needed"},
  };
  for (const auto& c : cases) {
    const std::string file = Write("blocks.csv", c.blocks);
    auto r = Headroom(Cat("pilot report --blocks ", file, " --traces ", a, " --report ", report));
    EXPECT_EQ(r.status, c.status) << c.blocks << ": " << r.err;
    EXPECT_TRUE(OneLine(r.err)) << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.says)) << c.blocks;
    EXPECT_FALSE(fs::exists(report));
  }
  auto over = Headroom(Cat("pilot report --blocks ", a, " --traces ", a, " --report ", a));
  EXPECT_EQ(over.status, 2);
  EXPECT_THAT(over.err, HasSubstr("refusing to overwrite an input"));
}

TEST_F(PilotCli, ValidateWritesCoverageAndFalsePositives) {
  const std::string base = Trace("base.csv", 4000, 300.0, 0.0);
  auto r = Headroom(Cat("pilot validate --baseline ", base,
                        " --effect 10% --metric energy --block 1min --pilots 20 "
                        "--blocks-per-arm 8 --json"));
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"pilots", "blocks_per_arm", "coverage", "coverage_ci",
                          "false_positive_rate", "false_positive_rate_ci", "power"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["pilots"], 20);
  auto big = Headroom(Cat("pilot validate --baseline ", base,
                          " --effect 10% --metric energy --block 1min --blocks-per-arm 40"));
  EXPECT_EQ(big.status, 2);
  EXPECT_TRUE(OneLine(big.err)) << big.err;
  EXPECT_THAT(big.err, HasSubstr("the baseline holds 66"));
}

}  // namespace
