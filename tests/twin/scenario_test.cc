#include "twin/scenario.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>
#include <utility>

#include <fmt/format.h>

#include "twin_test_util.h"

namespace headroom::twin {
namespace {

using ::testing::HasSubstr;

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(Scenario, ParsesEveryKey) {
  auto s = ParseScenario(testing::TinyScenario(), "tiny.toml");
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(s->name, "tiny");
  EXPECT_EQ(s->gpus, 1);
  EXPECT_DOUBLE_EQ(s->nameplate_w, 400);
  EXPECT_TRUE(s->has_rollout);
  EXPECT_EQ(s->group_size_range.hi, 16);
  EXPECT_DOUBLE_EQ(s->decode.power_w.b0, 100);
  EXPECT_DOUBLE_EQ(s->decode.idle_loaded_w, 80);
  EXPECT_DOUBLE_EQ(s->tick_s, 0.1);  // defaults
  EXPECT_DOUBLE_EQ(s->interval_s, 0.5);
  EXPECT_EQ(s->clock.points().size(), 2u);
}

TEST(Scenario, KvCapacityFromModelSizeTpAndMemory) {
  auto s = ParseScenario(testing::TinyScenario(), "tiny.toml");
  ASSERT_TRUE(s.ok());
  // KV bytes per token: 2 (K, V) x 4 layers x 4 heads x 64 x 2 bytes = 4096.
  EXPECT_DOUBLE_EQ(KvBytesPerToken(*s), 4096.0);
  // (80 GiB x 0.9 - 1e9 params x 2 bytes) / 4096 B per token / (100 + 1000) tokens.
  const double expected = (80.0 * 1073741824.0 * 0.9 - 2e9) / 4096.0 / 1100.0;
  EXPECT_EQ(KvCapacitySequences(*s), static_cast<int>(expected));
}

TEST(Scenario, ErrorsNameFileKeyAndReason) {
  const auto error = [](const std::string& text) {
    auto s = ParseScenario(text, "bad.toml");
    EXPECT_FALSE(s.ok());
    return s.ok() ? std::string() : s.error().message();
  };
  const std::string ok = testing::TinyScenario();
  EXPECT_THAT(error(Replace(ok, "prompts_per_step = 2\n", "")),
              HasSubstr("bad.toml: missing key 'rollout.prompts_per_step'"));
  EXPECT_THAT(error(Replace(ok, "nameplate_w = 400", "nameplate_w = -4")),
              HasSubstr("key 'hardware.nameplate_w': -4 is out of range"));
  EXPECT_THAT(error(Replace(ok, "nameplate_w = 400", "nameplate_w = 400\nnameplate = 3")),
              HasSubstr("key 'hardware.nameplate': unknown key"));
  EXPECT_THAT(error(ok + "[extra]\nx = 1\n"), HasSubstr("key 'extra': unknown key"));
  EXPECT_THAT(error(Replace(Replace(ok, "gpus = 1", "gpus = 4"), "tp = 1", "tp = 3")),
              HasSubstr("bad.toml: job.tp: tp = 3 does not divide job.gpus = 4"));
  EXPECT_THAT(error(Replace(ok, "memory_gib = 80", "memory_gib = 1")),
              HasSubstr("KV cache capacity is below one sequence"));
  EXPECT_THAT(error(Replace(ok, "group_size = 4", "group_size = 40")),
              HasSubstr("rollout.group_size: 40 is outside group_size_range [1, 16]"));
  EXPECT_THAT(error(Replace(ok, "gpus = 1", "gpus = \"one\"")),
              HasSubstr("key 'job.gpus': expected an integer"));
  EXPECT_THAT(error("[scenario\nname = 1"), HasSubstr("bad.toml:1:"));
  EXPECT_THAT(error(Replace(ok, "time_factor = [1.0, 2.0]", "time_factor = [1.0]")),
              HasSubstr("power_fraction and time_factor need the same length"));
  const std::string checkpoint = "[checkpoint]\nevery_steps = 2\nduration_s = 3\npower_w = 100\n";
  EXPECT_THAT(
      error(ok + checkpoint + "slow_onset_mean_s = 60\n"),
      HasSubstr("bad.toml: checkpoint.slow_onset_mean_s: needs checkpoint.slow_duration_s"));
  EXPECT_THAT(error(ok + checkpoint + "slow_duration_s = 60\n"),
              HasSubstr("checkpoint.slow_duration_s: needs checkpoint.slow_onset_mean_s > 0"));
  EXPECT_THAT(error(ok + checkpoint + "slow_onset_mean_s = 60\nslow_duration_s = -1\n"),
              HasSubstr("key 'checkpoint.slow_duration_s': -1 is out of range"));
}

TEST(Scenario, BudgetRangeDefaultsAndChecks) {
  const std::string ok = testing::TinyScenario();
  auto s = ParseScenario(ok, "t.toml");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->budget_range_w.first, s->idle_loaded_w);  // absent: idle-loaded to nameplate
  EXPECT_EQ(s->budget_range_w.second, s->nameplate_w);
  s = ParseScenario(Replace(ok, "default_w = 300", "default_w = 300\nrange_w = [250, 350]"),
                    "t.toml");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->budget_range_w.first, 250.0);
  auto bad = ParseScenario(Replace(ok, "default_w = 300", "default_w = 300\nrange_w = [310, 320]"),
                           "bad.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error().message(),
              HasSubstr("bad.toml: budget.default_w: 300 W is outside budget.range_w [310, 320]"));
  bad = ParseScenario(Replace(ok, "default_w = 300", "default_w = 300\nrange_w = [320, 310]"),
                      "bad.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error().message(),
              HasSubstr("bad.toml:62:11: key 'budget.range_w': [320, 310] must satisfy 1 <= low "
                        "<= high <= 600"));
}

// A value of the wrong type is one line naming the file, the line and the key, whatever comes
// after it; it used to be hidden behind a generic budget.range_w error.
TEST(Scenario, TypeErrorsNameTheKey) {
  const std::string ok = testing::TinyScenario();
  const struct {
    std::string from, to, message;
  } cases[] = {
      {"nameplate_w = 400", "nameplate_w = \"400\"",
       "bad.toml:8:15: key 'hardware.nameplate_w': expected a number"},
      {"nameplate_w = 400", "nameplate_w = true",
       "bad.toml:8:15: key 'hardware.nameplate_w': expected a number"},
      {"decode_power_b0 = 100", "decode_power_b0 = [100]",
       "bad.toml:30:19: key 'rollout.decode_power_b0': expected a number"},
      {"power_w = 350", "power_w = {w = 350}",
       "bad.toml:45:11: key 'train.power_w': expected a number"},
      {"gpus = 1", "gpus = 1.5", "bad.toml:4:8: key 'job.gpus': expected an integer"},
      {"name = \"tiny\"\n[job]", "name = 7\n[job]",
       "bad.toml:2:8: key 'scenario.name': expected a string"},
      {"group_size_range = [1, 16]", "group_size_range = \"1-16\"",
       "bad.toml:22:20: key 'rollout.group_size_range': expected [low, high] integers"},
      {"power_fraction = [1.0, 0.5]", "power_fraction = [1.0, \"half\"]",
       "bad.toml:57:24: key 'power_limit.power_fraction': every value must be a number"},
      {"time_factor = [1.0, 2.0]", "time_factor = [1.0, true]",
       "bad.toml:58:21: key 'power_limit.time_factor': every value must be a number"},
      {"default_w = 300", "default_w = 300\nrange_w = \"wide\"",
       "bad.toml:62:11: key 'budget.range_w': expected [low, high] numbers"},
      {"default_w = 300", "default_w = 300\nrange_w = [250, \"x\"]",
       "bad.toml:62:11: key 'budget.range_w': expected [low, high] numbers"},
  };
  auto table = ParseScenario("telemetry = 5\n" + Replace(ok, "[telemetry]\naverage_s = 1.0\n", ""),
                             "bad.toml");
  ASSERT_FALSE(table.ok());
  EXPECT_THAT(table.error().message(),
              HasSubstr("bad.toml:1:13: key 'telemetry': expected a table"));
  for (const auto& c : cases) {
    auto s = ParseScenario(Replace(ok, c.from, c.to), "bad.toml");
    ASSERT_FALSE(s.ok()) << c.to;
    EXPECT_THAT(s.error().message(), HasSubstr(c.message)) << c.to;
    EXPECT_EQ(s.error().message().find('\n'), std::string::npos) << c.to;
  }
}

TEST(Scenario, AdmissionIsContinuousUnlessTheRolloutSaysChunked) {
  const std::string ok = testing::TinyScenario();
  auto s = ParseScenario(ok, "t.toml");
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(s->admission, Admission::kContinuous);
  for (const auto& [text, expected] : {std::pair{"\"continuous\"", Admission::kContinuous},
                                       std::pair{"\"chunked\"", Admission::kChunked}}) {
    s = ParseScenario(
        Replace(ok, "concurrency = 8\n", fmt::format("concurrency = 8\nadmission = {}\n", text)),
        "t.toml");
    ASSERT_TRUE(s.ok()) << s.error().message();
    EXPECT_EQ(s->admission, expected);
  }
  // A bad value: one line naming the file, where, the key and what it may be.
  for (const char* bad : {"\"Chunked\"", "\"batched\"", "1", "\"chunked\\nx\""}) {
    SCOPED_TRACE(bad);
    s = ParseScenario(
        Replace(ok, "concurrency = 8\n", fmt::format("concurrency = 8\nadmission = {}\n", bad)),
        "bad.toml");
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(s.error().message(),
                HasSubstr("bad.toml:22:13: key 'rollout.admission': expected \"continuous\" or "
                          "\"chunked\""));
    EXPECT_EQ(s.error().message().find('\n'), std::string::npos);
  }
  // Outside [rollout] it is an unknown key.
  s = ParseScenario(Replace(ok, "gpus = 1\n", "gpus = 1\nadmission = \"chunked\"\n"), "bad.toml");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error().message(), HasSubstr("key 'job.admission': unknown key"));
}

TEST(Scenario, AGenerationOnlyJobMayLeaveOutTrain) {
  const std::string text =
      Replace(testing::TinyScenario(), "[train]\ntokens_per_s = 500\npower_w = 350\n", "");
  auto s = ParseScenario(text, "gen.toml");
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_FALSE(s->has_train);
  EXPECT_TRUE(ParseScenario(testing::TinyScenario(), "t.toml")->has_train);
}

TEST(Scenario, ABuiltinPerSourcePaperScaleAndTheH100Checks) {
  const auto names = BuiltinScenarioNames();
  for (const char* name :
       {"a100-7b-tp1", "a100-14b-tp2", "a100-72b-tp4", "h100-8b-tp1", "h100-70b-tp4",
        "h100-8b-ddp-train", "a100-7b-tp1-vllm", "a100-72b-tp4-grpo"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
    auto s = LoadScenario(name);
    ASSERT_TRUE(s.ok()) << name << ": " << s.error().message();
    EXPECT_EQ(s->name, name);
  }
  auto missing = LoadScenario("no-such-scenario");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().kind(), ErrorKind::kUsage);
}

}  // namespace
}  // namespace headroom::twin

namespace headroom::twin {
namespace {

// ScenarioToToml writes what ParseScenario reads back to the same values: every built-in, and
// the same twin run from the written file tick for tick.
TEST(ScenarioToml, EveryBuiltinRoundTrips) {
  for (const std::string& name : BuiltinScenarioNames()) {
    SCOPED_TRACE(name);
    auto s = LoadScenario(name);
    ASSERT_TRUE(s.ok());
    const std::string text = ScenarioToToml(*s, {"written by a test", "second line"});
    EXPECT_EQ(text.rfind("# written by a test\n# second line\n", 0), 0u);
    auto back = ParseScenario(text, "round trip");
    ASSERT_TRUE(back.ok()) << back.error().message() << "\n" << text;
    EXPECT_EQ(ScenarioToToml(*back), ScenarioToToml(*s));
    EXPECT_EQ(back->name, s->name);
    EXPECT_EQ(back->decode.power_w.k, s->decode.power_w.k);
    EXPECT_EQ(back->decode.n_min, s->decode.n_min);
    EXPECT_EQ(back->budget_range_w, s->budget_range_w);
    EXPECT_EQ(back->clock.points().size(), s->clock.points().size());
    EXPECT_EQ(back->checkpoint_slow_onset_mean_s, s->checkpoint_slow_onset_mean_s);
    EXPECT_EQ(back->has_rollout, s->has_rollout);
    EXPECT_EQ(back->has_train, s->has_train);
    EXPECT_EQ(back->stop_at_s, s->stop_at_s);
  }
}

TEST(ScenarioToml, AdmissionRoundTrips) {
  auto s = LoadScenario("a100-14b-tp2");
  ASSERT_TRUE(s.ok());
  EXPECT_NE(ScenarioToToml(*s).find("\nadmission = \"continuous\"\n"), std::string::npos);
  s->admission = Admission::kChunked;
  const std::string text = ScenarioToToml(*s);
  EXPECT_NE(text.find("\nadmission = \"chunked\"\n"), std::string::npos);
  auto back = ParseScenario(text, "chunked");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->admission, Admission::kChunked);
}

TEST(ScenarioToml, StringsAreEscaped) {
  auto s = LoadScenario("a100-7b-tp1");
  ASSERT_TRUE(s.ok());
  s->description = "a \"quoted\" \\ back\nslash";
  auto back = ParseScenario(ScenarioToToml(*s), "escaped");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->description, s->description);
}

}  // namespace
}  // namespace headroom::twin
