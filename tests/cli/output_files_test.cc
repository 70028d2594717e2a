#include "cli/output_files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace headroom::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TEST(FormatBytes, TwoSignificantDigitsInDecimalUnits) {
  EXPECT_EQ(FormatBytes(950), "950 B");
  EXPECT_EQ(FormatBytes(1234), "1.2 kB");
  EXPECT_EQ(FormatBytes(12345), "12 kB");
  EXPECT_EQ(FormatBytes(1.2e9), "1.2 GB");
  EXPECT_EQ(FormatBytes(1.3e15), "1.3 PB");
}

TEST(OutputInputs, SidecarsThatExistAndScenarioFiles) {
  const fs::path dir = fs::temp_directory_path() / "headroom_output_inputs";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string trace = (dir / "run.csv").string();
  std::ofstream(trace) << "x";
  EXPECT_EQ(TraceInputs("TRACE", trace).size(), 1u);
  std::ofstream(dir / "run.meta.json") << "{}";
  const auto inputs = TraceInputs("TRACE", trace);
  ASSERT_EQ(inputs.size(), 2u);
  EXPECT_EQ(inputs[1].first, "TRACE's sidecar");
  EXPECT_EQ(inputs[1].second, (dir / "run.meta.json").string());
  const auto scenarios = ScenarioInputs("--scenario", "a100-7b-tp1, my.toml ,h100-8b-tp1");
  ASSERT_EQ(scenarios.size(), 1u);  // built-ins are not files
  EXPECT_EQ(scenarios[0].second, "my.toml");
  fs::remove_all(dir);
}

TEST(CheckOutputSpace, RefusesWhatCannotFitInOneLine) {
  const std::string path = (fs::temp_directory_path() / "headroom_never_written.csv").string();
  EXPECT_TRUE(CheckOutputSpace("test", path, 1000).ok());
  auto st = CheckOutputSpace("test", path, 1e21);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().kind(), ErrorKind::kIo);
  EXPECT_THAT(st.error().message(),
              HasSubstr("test: about 1000 EB to write to " + path + ", but its file system has "));
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace headroom::cli
