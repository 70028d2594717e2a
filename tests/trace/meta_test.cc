#include "trace/meta.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace headroom::trace {
namespace {

using ::testing::HasSubstr;

TEST(ParseMeta, ReadsEveryKey) {
  std::vector<std::string> warnings;
  auto meta =
      ParseMeta(R"({"gpu_model": "A100-SXM4-80GB", "nameplate_w": 400, "sample_interval_s": 0.5,
                           "job": "grpo 7b", "notes": "n", "extra": 1})",
                "m.json", &warnings);
  ASSERT_TRUE(meta.ok()) << meta.error().message();
  EXPECT_EQ(meta->gpu_model, "A100-SXM4-80GB");
  EXPECT_EQ(meta->nameplate_w, 400.0);
  EXPECT_EQ(meta->sample_interval_s, 0.5);
  EXPECT_EQ(meta->job, "grpo 7b");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("unknown key 'extra'"));
}

TEST(ParseMeta, ErrorsNameTheKeyOrThePlace) {
  EXPECT_THAT(ParseMeta(R"({"nameplate_w": "400"})", "m.json", nullptr).error().message(),
              HasSubstr("m.json: key 'nameplate_w': expected a number"));
  EXPECT_THAT(ParseMeta(R"({"nameplate_w": -1})", "m.json", nullptr).error().message(),
              HasSubstr("must be > 0"));
  EXPECT_THAT(ParseMeta("{\n  \"job\": 3,\n}", "m.json", nullptr).error().message(),
              HasSubstr("m.json:3:1: not valid JSON"));
  EXPECT_THAT(ParseMeta("[1]", "m.json", nullptr).error().message(),
              HasSubstr("expected a JSON object"));
}

TEST(LoadMetaFor, FindsEitherSidecarName) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "headroom_meta_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string trace = (dir / "run.csv").string();
  auto none = LoadMetaFor(trace, nullptr);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  std::ofstream(dir / "run.meta.json") << R"({"nameplate_w": 700})";
  auto stem = LoadMetaFor(trace, nullptr);
  ASSERT_TRUE(stem.ok() && stem->has_value());
  EXPECT_EQ((*stem)->nameplate_w, 700.0);
  std::ofstream(dir / "run.csv.meta.json") << R"({"nameplate_w": 400})";
  auto full = LoadMetaFor(trace, nullptr);  // <trace>.meta.json wins
  ASSERT_TRUE(full.ok() && full->has_value());
  EXPECT_EQ((*full)->nameplate_w, 400.0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace headroom::trace
