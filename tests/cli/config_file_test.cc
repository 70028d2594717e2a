// `--config FILE` (cli/config_file.h) on real CLI::Apps: the command line over the file for every
// option by either of its names, strict types, one line naming file, line and key.
#include "cli/config_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/numbers.h"
#include "cli_main/renamed_options.h"

namespace headroom::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class ConfigFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("headroom_config_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  static void Parse(CLI::App& app, std::vector<std::string> args) {
    std::reverse(args.begin(), args.end());  // CLI11 takes them last first
    app.parse(args);
  }
  fs::path dir_;
};

// The agent's renamed options as agent_command.cc declares them, each bound to one value.
struct Renamed {
  std::string site_etcd;
  bool fail_open = false;
  std::optional<double> budget_w;
  void Declare(CLI::App& app) {
    app.add_option("--site-etcd", site_etcd, "the site's etcd");
    AddRenamedOption(app, "--fleet", "--site-etcd", &site_etcd);
    AddRenamedFlag(app, "--fleet-fail-open", "--site-fail-open", &fail_open);
    app.add_flag("--site-fail-open", fail_open, "fail open");
    app.add_option("--budget-w", budget_w, "budget")->check(Real(1.0, 2000.0));
  }
};

// Issue 53, item 3: a renamed key in the file overrode the command line's new name
// (--site-fail-open=false ran fail-open with `fleet-fail-open = true` in the file).
TEST_F(ConfigFile, TheCommandLineWinsForEveryOptionByEitherName) {
  {
    CLI::App app;
    Renamed r;
    r.Declare(app);
    Parse(app, {"--site-fail-open=false", "--site-etcd", "etcd://cli:1"});
    auto applied = ApplyConfigFile(
        app, Write("a.toml", "fleet-fail-open = true\nfleet = \"etcd://file:1\"\n"), "agent");
    ASSERT_TRUE(applied.ok()) << applied.error().message();
    EXPECT_FALSE(r.fail_open);
    EXPECT_EQ(r.site_etcd, "etcd://cli:1");
    // Given in the file, overridden or not: said once each.
    EXPECT_EQ(*applied, (std::vector<std::string>{"--fleet", "--fleet-fail-open"}));
    EXPECT_EQ(DeprecationNotes(app, *applied),
              (std::vector<std::string>{
                  "--fleet is deprecated: use --site-etcd (--fleet goes in a later release)",
                  "--fleet-fail-open is deprecated: use --site-fail-open (--fleet-fail-open goes "
                  "in a later release)"}));
  }
  {  // The old name on the command line, the new one in the file.
    CLI::App app;
    Renamed r;
    r.Declare(app);
    Parse(app, {"--fleet", "etcd://cli:1"});
    auto applied = ApplyConfigFile(
        app, Write("b.toml", "site-etcd = \"etcd://file:1\"\nsite-fail-open = true\n"), "agent");
    ASSERT_TRUE(applied.ok()) << applied.error().message();
    EXPECT_EQ(r.site_etcd, "etcd://cli:1");
    EXPECT_TRUE(r.fail_open);  // not on the command line: the file's
    EXPECT_TRUE(applied->empty());
    EXPECT_EQ(DeprecationNotes(app, *applied).size(), 1u);  // --fleet, once
  }
  {  // Both names in the file: the new one.
    CLI::App app;
    Renamed r;
    r.Declare(app);
    Parse(app, {});
    auto applied = ApplyConfigFile(app,
                                   Write("c.toml",
                                         "fleet = \"etcd://old:1\"\nsite-etcd = \"etcd://new:1\"\n"
                                         "site-fail-open = false\nfleet-fail-open = true\n"),
                                   "agent");
    ASSERT_TRUE(applied.ok()) << applied.error().message();
    EXPECT_EQ(r.site_etcd, "etcd://new:1");
    EXPECT_FALSE(r.fail_open);
  }
}

// Issue 53, item 7: toml++ reads true as 1 where an integer is asked for: `budget-w = true` ran at
// 1 W. A flag takes a boolean only, an option of numbers numbers only, any other strings.
TEST_F(ConfigFile, TypesAreStrictInOneLineNamingFileLineAndKey) {
  const struct {
    std::string toml;
    std::string message;
  } cases[] = {
      {"budget-w = true\n", "key 'budget-w': expected a number, not a boolean"},
      {"budget-w = \"300\"\n", "key 'budget-w': expected a number, not a string"},
      {"site-fail-open = 1\n",
       "key 'site-fail-open': expected a boolean (true or false), not an "
       "integer"},
      {"site-fail-open = \"true\"\n",
       "key 'site-fail-open': expected a boolean (true or false), not a string"},
      {"site-etcd = true\n", "key 'site-etcd': expected a string, not a boolean"},
      {"site-etcd = 2379\n", "key 'site-etcd': expected a string, not an integer"},
      {"budget-w = [300, false]\n", "key 'budget-w': expected a number, not a boolean"},
      {"budget-w = 1979-05-27\n", "key 'budget-w': expected a number, not a date or time"},
  };
  for (const auto& c : cases) {
    CLI::App app;
    Renamed r;
    r.Declare(app);
    Parse(app, {});
    const std::string path = Write("t.toml", "# a comment\n" + c.toml);
    auto applied = ApplyConfigFile(app, path, "agent");
    ASSERT_FALSE(applied.ok()) << c.toml;
    EXPECT_EQ(applied.error().kind(), ErrorKind::kUsage) << c.toml;
    EXPECT_EQ(applied.error().message(), path + ":2: " + c.message) << c.toml;
    EXPECT_FALSE(r.budget_w.has_value()) << c.toml;
  }
  CLI::App app;
  Renamed r;
  r.Declare(app);
  Parse(app, {});
  auto applied = ApplyConfigFile(
      app,
      Write("good.toml", "budget-w = 300\nsite-fail-open = true\nsite-etcd = \"etcd://h:1\"\n"),
      "agent");
  ASSERT_TRUE(applied.ok()) << applied.error().message();
  EXPECT_EQ(r.budget_w, 300.0);
  EXPECT_TRUE(r.fail_open);
  CLI::App floats;
  Renamed f;
  f.Declare(floats);
  Parse(floats, {});
  ASSERT_TRUE(ApplyConfigFile(floats, Write("f.toml", "budget-w = 2.5e2\n"), "agent").ok());
  EXPECT_EQ(f.budget_w, 250.0);
}

// Every numeric option and every flag of the two daemons, as they declare them: a boolean is no
// number, a number no flag.
TEST_F(ConfigFile, EveryDaemonOptionTakesItsOwnTypeOnly) {
  const auto setup = [](CLI::App& app, const std::string& command) {
    (void)(command == "agent" ? SetupAgent(app) : SetupCoordinator(app));
  };
  for (const char* command : {"agent", "coordinator"}) {
    CLI::App app;
    setup(app, command);
    int numbers = 0;
    int flags = 0;
    for (const CLI::Option* o : app.get_options()) {
      const std::string name = o->get_lnames().empty() ? "" : o->get_lnames().front();
      if (name.empty() || name == "config" || name == "help") continue;
      std::string type = o->get_type_name();
      type = type.substr(0, type.find(':'));
      const bool flag = o->get_expected_max() == 0;
      const bool number = type == "FLOAT" || type == "INT" || type == "UINT";
      if (!flag && !number) continue;
      CLI::App fresh;
      setup(fresh, command);
      Parse(fresh, {});
      const std::string path = Write(name + ".toml", name + (flag ? " = 1\n" : " = true\n"));
      auto applied = ApplyConfigFile(fresh, path, command);
      ASSERT_FALSE(applied.ok()) << command << " " << name;
      EXPECT_THAT(applied.error().message(),
                  HasSubstr(flag ? "expected a boolean (true or false), not an integer"
                                 : "expected a number, not a boolean"))
          << command << " " << name;
      (flag ? flags : numbers) += 1;
    }
    // Both kinds are there to check (the classification found them).
    EXPECT_GE(numbers, 5) << command;
    EXPECT_GE(flags, 1) << command;
  }
}

// Issue 53, item 8: a FIFO as --config is refused at once, in one line (before: open() waited
// for a writer that never came).
TEST_F(ConfigFile, AFifoIsRefusedNotWaitedOn) {
  const std::string fifo = (dir_ / "config.fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  CLI::App app;
  Renamed r;
  r.Declare(app);
  Parse(app, {});
  auto applied = ApplyConfigFile(app, fifo, "agent");
  ASSERT_FALSE(applied.ok());
  EXPECT_EQ(applied.error().message(), "--config " + fifo + ": is a FIFO, not a regular file");
}

}  // namespace
}  // namespace headroom::cli
