// End-to-end: the headroom binary as a user runs it. Exit status 0 success, 1 runtime or input
// error, 2 usage error; errors are one line on stderr; nothing half-written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

struct Outcome {
  int status;
  std::string out;
  std::string err;
};

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("headroom_cli_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  static std::string Slurp(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  Outcome Headroom(const std::string& args) {
    const fs::path out = dir_ / "stdout", err = dir_ / "stderr";
    const std::string cmd =
        std::string(HEADROOM_BINARY) + " " + args + " >" + out.string() + " 2>" + err.string();
    const int raw = std::system(cmd.c_str());
    return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, Slurp(out), Slurp(err)};
  }
  fs::path dir_;
};

TEST_F(Cli, VersionAndHelp) {
  auto r = Headroom("--version");
  EXPECT_EQ(r.status, 0);
  EXPECT_THAT(r.out, HasSubstr("headroom "));
  for (const char* command : {"analyze", "fleet", "synth"}) {
    auto h = Headroom(std::string(command) + " --help");
    EXPECT_EQ(h.status, 0) << command;
    EXPECT_THAT(h.out, HasSubstr("Usage")) << command;
  }
}

TEST_F(Cli, UsageErrorsExitTwo) {
  EXPECT_EQ(Headroom("").status, 2);
  EXPECT_EQ(Headroom("frobnicate").status, 2);
  EXPECT_EQ(Headroom("analyze").status, 2);
  const std::string trace = Write("t.csv", "t_s,gpu,power_w\n0,0,1\n1,0,2\n");
  auto bad_window = Headroom("analyze " + trace + " --windows 5x");
  EXPECT_EQ(bad_window.status, 2);
  EXPECT_THAT(bad_window.err, HasSubstr("bad duration '5x'"));
  EXPECT_EQ(Headroom("analyze " + trace + " --scope node").status, 2);
  EXPECT_EQ(Headroom("analyze " + trace + " --budget-w -3").status, 2);
  EXPECT_EQ(Headroom("analyze " + trace + " --format xml").status, 2);
}

TEST_F(Cli, InputErrorsExitOneWithOneLineNamingTheSpot) {
  auto missing = Headroom("analyze " + (dir_ / "nope.csv").string());
  EXPECT_EQ(missing.status, 1);
  EXPECT_THAT(missing.err, HasSubstr("nope.csv: cannot open"));
  const std::string bad = Write("bad.csv", "t_s,gpu,power_w\n0,0,1\n1,0,oops\n");
  const std::string report = (dir_ / "r.html").string();
  auto r = Headroom("analyze " + bad + " --report " + report);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("bad.csv:3:3: column 'power_w': unparsable number 'oops'"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1);
  EXPECT_FALSE(fs::exists(report));  // nothing half-written
  EXPECT_TRUE(r.out.empty());
}

TEST_F(Cli, AnalyzeJsonByHand) {
  const std::string trace = Write("t.csv", "t_s,gpu,power_w\n0,0,100\n1,0,200\n2,0,100\n3,0,200\n");
  Write("t.csv.meta.json", R"({"nameplate_w": 400, "gpu_model": "A100"})");
  auto r = Headroom("analyze " + trace + " --json --budget-w 120 --windows 2s");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["samples"], 4);
  EXPECT_DOUBLE_EQ(j["energy_j"].get<double>(), 450.0);
  EXPECT_DOUBLE_EQ(j["windows"][0]["max_window_power_w"].get<double>(), 150.0);
  EXPECT_DOUBLE_EQ(j["windows"][0]["violation_fraction"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j["nameplate_w"].get<double>(), 400.0);  // from the sidecar
  EXPECT_DOUBLE_EQ(j["peak_fraction_of_nameplate"].get<double>(), 0.5);
  auto override_np = Headroom("analyze " + trace + " --json --nameplate-w 200");
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(override_np.out)["nameplate_w"].get<double>(), 200.0);
}

TEST_F(Cli, AnalyzeTableAndReport) {
  const std::string trace = Write("t.csv", "t_s,gpu,power_w\n0,0,100\n1,0,200\n2,0,100\n3,0,200\n");
  const std::string report = (dir_ / "r.html").string();
  auto r = Headroom("analyze " + trace + " --budget-w 150 --report " + report);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("window"));
  EXPECT_THAT(r.out, HasSubstr("report     " + report));
  EXPECT_THAT(Slurp(report), HasSubstr("<svg"));
}

TEST_F(Cli, NvidiaSmiWithoutIndexNeedsGpus) {
  const std::string log = Write("smi.csv",
                                "timestamp, power.draw [W]\n"
                                "2025/07/27 00:47:09.120, 69.85 W\n"
                                "2025/07/27 00:47:09.123, 72.83 W\n"
                                "2025/07/27 00:47:09.220, 70.85 W\n"
                                "2025/07/27 00:47:09.223, 73.83 W\n");
  auto no_gpus = Headroom("analyze " + log);
  EXPECT_EQ(no_gpus.status, 2);
  EXPECT_THAT(no_gpus.err, HasSubstr("--gpus"));
  auto ok = Headroom("analyze " + log + " --gpus 2 --json --scope sum");
  ASSERT_EQ(ok.status, 0) << ok.err;
  EXPECT_EQ(nlohmann::json::parse(ok.out)["gpus"], 2);
}

TEST_F(Cli, FleetJsonAndCopies) {
  const std::string a = Write("a.csv", "t_s,gpu,power_w\n0,0,100\n1,0,200\n2,0,300\n3,0,400\n");
  const std::string b = Write("b.csv", "t_s,gpu,power_w\n0,0,10\n1,0,10\n2,0,10\n3,0,10\n4,0,10\n");
  auto no_nameplate = Headroom("fleet " + a);
  EXPECT_EQ(no_nameplate.status, 2);
  EXPECT_THAT(no_nameplate.err, HasSubstr("nameplate"));
  auto r = Headroom("fleet " + a + " " + b +
                    ":2 --nameplate-w 500 --offsets none --trials 1 "
                    "--windows 1s,2s --risk-window 2s --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["gpus"], 3);
  EXPECT_DOUBLE_EQ(j["nameplate_w"].get<double>(), 1500.0);
  EXPECT_DOUBLE_EQ(j["windows"][0]["peak_fraction_max"].get<double>(), 420.0 / 1500.0);
  EXPECT_DOUBLE_EQ(j["oversubscription_factor"].get<double>(), 1500.0 / (370.0 * 1.05));
  EXPECT_EQ(Headroom("fleet " + a + " --nameplate-w 500 --budget-w 1 --budget-fraction 0.5").status,
            2);
}

TEST_F(Cli, SynthWritesATraceAnalyzeReads) {
  const std::string out = (dir_ / "s.csv").string();
  auto s = Headroom("synth --gpus 2 --duration-s 60 --out " + out);
  ASSERT_EQ(s.status, 0) << s.err;
  EXPECT_TRUE(fs::exists(out + ".meta.json"));
  auto r = Headroom("analyze " + out + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["gpus"], 2);
  EXPECT_EQ(j["samples"], 2 * 601);
  EXPECT_DOUBLE_EQ(j["nameplate_w"].get<double>(), 400.0);
  EXPECT_FALSE(j["tokens"].is_null());
}

}  // namespace
