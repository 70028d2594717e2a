// End-to-end: the headroom binary as a user runs it. Exit status 0 success, 1 runtime or input
// error, 2 usage error; errors are one line on stderr; nothing half-written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "../support/binary_test.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

using headroom::test_support::Outcome;

class Cli : public headroom::test_support::BinaryTest {
 protected:
  Cli() : BinaryTest("headroom_cli_") {}
  // `wrapped`: `args` is a whole command line (e.g. under `timeout`); HEADROOM_BINARY stands
  // for the binary when it starts with "timeout N ".
  Outcome Headroom(const std::string& args, bool wrapped = false) {
    std::string line = std::string(HEADROOM_BINARY) + " " + args;
    if (wrapped) {
      line = args;
      if (line.rfind("timeout ", 0) == 0 && line.find(HEADROOM_BINARY) == std::string::npos) {
        const size_t after = line.find(' ', 8);
        line = line.substr(0, after) + " " + HEADROOM_BINARY + line.substr(after);
      }
    }
    return Run(line);
  }
};

TEST_F(Cli, VersionAndHelp) {
  auto r = Headroom("--version");
  EXPECT_EQ(r.status, 0);
  EXPECT_THAT(r.out, HasSubstr("headroom "));
  EXPECT_THAT(r.out, HasSubstr(" (commit "));  // the build's git commit, "unknown" outside git
  for (const char* command : {"analyze", "fleet", "synth"}) {
    auto h = Headroom(std::string(command) + " --help");
    EXPECT_EQ(h.status, 0) << command;
    EXPECT_THAT(h.out, HasSubstr("Usage")) << command;
  }
}

// A command with commands of its own, given none, names them; --help shows the defaults.
TEST_F(Cli, ACommandWithoutItsSubcommandNamesThem) {
  auto r = Headroom("twin");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("headroom twin needs a command: run, authority, calibrate, "
                               "scenarios (headroom twin --help)"));
  r = Headroom("");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("headroom needs a command: analyze, fleet,"));
  EXPECT_THAT(Headroom("pilot").err, HasSubstr("headroom pilot needs a command: plan, report"));
  if (fs::exists(fs::path(HEADROOM_BINARY).parent_path() / "headroom-diloco")) {
    r = Headroom("diloco");
    EXPECT_EQ(r.status, 2);
    EXPECT_THAT(r.err, HasSubstr("needs a command: worker, ddp, eval, control, replay, local"));
  }
  const std::string help = Headroom("agent --help").out;
  EXPECT_THAT(help, HasSubstr("--interval-s FLOAT:[0.01, 60]=0.5"));
  EXPECT_THAT(help, HasSubstr("--nvml-library TEXT=libnvidia-ml.so.1"));
}

// `headroom completion bash`: a script bash accepts, completing commands, then the options of
// the command the line is in (an option's value stepped over).
TEST_F(Cli, BashCompletionCompletesCommandsAndTheirOptions) {
  const std::string script = Write("completion.sh", Headroom("completion bash").out);
  const auto complete = [&](const std::string& words, int cword) {
    return Run("timeout 10 bash -c 'source " + script + "; COMP_WORDS=(" + words +
               "); COMP_CWORD=" + std::to_string(cword) + "; _headroom; echo \"${COMPREPLY[*]}\"'")
        .out;
  };
  EXPECT_EQ(complete("headroom tw", 1), "twin\n");
  EXPECT_EQ(complete("headroom twin ru", 2), "run\n");
  EXPECT_EQ(complete("headroom agent --source twin --sc", 4), "--scenario\n");
  EXPECT_EQ(complete("headroom coordinator --con", 2), "--config\n");
  auto r = Headroom("completion zsh");
  EXPECT_EQ(r.status, 2);
}

TEST_F(Cli, UsageErrorsExitTwo) {
  EXPECT_EQ(Headroom("").status, 2);
  auto unknown = Headroom("frobnicate");
  EXPECT_EQ(unknown.status, 2);
  EXPECT_THAT(unknown.err, HasSubstr("unknown command 'frobnicate' (commands: analyze, "));
  auto typo = Headroom("analize x.csv");
  EXPECT_EQ(typo.status, 2);
  EXPECT_EQ(typo.err, "headroom: error: unknown command 'analize' (did you mean 'analyze'?)\n");
  EXPECT_THAT(Headroom("fleetsim").err, HasSubstr("did you mean 'fleet-sim'?"));
  EXPECT_EQ(Headroom("analyze").status, 2);
  const std::string trace = Write("t.csv", "t_s,gpu,power_w\n0,0,1\n1,0,2\n");
  auto bad_window = Headroom("analyze " + trace + " --windows 5x");
  EXPECT_EQ(bad_window.status, 2);
  EXPECT_THAT(bad_window.err, HasSubstr("bad duration '5x'"));
  EXPECT_EQ(Headroom("analyze " + trace + " --scope node").status, 2);
  EXPECT_EQ(Headroom("analyze " + trace + " --budget-w -3").status, 2);
  EXPECT_EQ(Headroom("analyze " + trace + " --format xml").status, 2);
}

// Every numeric option: a strict plain decimal in a finite range, or exit 2 with one line that
// names the flag. (Run under `timeout`: before, some of these never ended.)
TEST_F(Cli, NumericOptionsAreStrictAndBounded) {
  const std::string trace = Write("t.csv", "t_s,gpu,power_w\n0,0,1\n1,0,2\n");
  const std::string out = (dir_ / "out.csv").string();
  const struct {
    std::string args;
    std::string message;
  } cases[] = {
      {"twin run --scenario a100-7b-tp1 --duration-s nan --out " + out,
       "--duration-s: 'nan' is not a number in [0.001, 10000000]"},
      {"synth --duration-s nan --out " + out, "--duration-s: 'nan' is not a number"},
      {"twin run --scenario a100-7b-tp1 --steps 1 --power-limit-w nan --out " + out,
       "--power-limit-w: 'nan' is not a number in [1, 10000]"},
      {"twin run --scenario a100-7b-tp1 --steps 1 --concurrency 0x10 --out " + out,
       "--concurrency: '0x10' is not an integer in [1, 1048576]"},
      {"agent --interval-s nan --speed 0 --duration-s 1 --listen 127.0.0.1:0",
       "--interval-s: 'nan' is not a number in [0.01, 60]"},
      {"agent --valid-for-s nan --speed 0 --duration-s 1 --listen 127.0.0.1:0",
       "--valid-for-s: 'nan' is not a number in [0.1, 3600]"},
      {"analyze " + trace + " --budget-w nan", "--budget-w: 'nan' is not a number"},
      {"fleet " + trace + " --nameplate-w 400 --budget-w 1e308",
       "--budget-w: '1e308' is out of range [1, 1000000000]"},
      {"fleet " + trace + " --nameplate-w 400 --budget-w nan", "--budget-w: 'nan'"},
      {"eval --scenario a100-7b-tp1 --budget-w inf", "--budget-w: 'inf' is not a number"},
      {"train --scenario a100-7b-tp1 --timesteps 10 --seed -1 --out " + out,
       "--seed: '-1' is out of range [0, 4294967295]"},
      {"analyze " + trace + " --gpus 010", "--gpus: '010' is not an integer"},
      {"analyze " + trace + " --windows 0.5", "--windows: bad duration '0.5': give a unit"},
      {"fleet " + trace + " --nameplate-w 400 --risk-window 30",
       "--risk-window: bad duration '30': give a unit"},
      {"analyze " + trace + " --band-hz 0.1,nan", "--band-hz: HI 'nan' is not a number"},
  };
  for (const auto& c : cases) {
    auto r = Headroom("timeout 20 " + c.args, /*wrapped=*/true);
    EXPECT_EQ(r.status, 2) << c.args;
    EXPECT_EQ(r.err.rfind("headroom: error: " + c.message, 0), 0u) << c.args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << ": " << r.err;
    EXPECT_FALSE(fs::exists(out)) << c.args;
  }
}

TEST_F(Cli, ParseErrorsAreOneLineAndHelpStillShowsTypes) {
  for (const char* args : {"analyze --frobnicate", "", "twin run --scenario", "agent extra"}) {
    auto r = Headroom(args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_EQ(r.err.rfind("headroom: error: ", 0), 0u) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
  auto help = Headroom("twin run --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_THAT(help.out, HasSubstr("--duration-s FLOAT:[0.001, 10000000]"));
  EXPECT_THAT(help.out, HasSubstr("--seed UINT:[0, 4294967295]"));
  EXPECT_THAT(Headroom("agent --help").out, HasSubstr("--interval-s FLOAT:[0.01, 60]"));
}

TEST_F(Cli, FleetCopiesAreBoundedAndFilesComeFirst) {
  const std::string a = Write("a.csv", "t_s,gpu,power_w\n0,0,100\n1,0,200\n2,0,300\n");
  auto negative = Headroom("fleet " + a + ":-1 --nameplate-w 400");
  EXPECT_EQ(negative.status, 2);
  EXPECT_THAT(negative.err, HasSubstr("COPIES '-1' is out of range [1, 100000]"));
  auto huge = Headroom("timeout 20 " + std::string(HEADROOM_BINARY) + " fleet " + a +
                           ":1000000000 --nameplate-w 400",
                       /*wrapped=*/true);
  EXPECT_EQ(huge.status, 2);
  EXPECT_THAT(huge.err, HasSubstr("COPIES '1000000000' is out of range [1, 100000]"));
  auto too_much =
      Headroom("timeout 20 fleet " + a + ":100000 --nameplate-w 400 --trials 100000", true);
  EXPECT_EQ(too_much.status, 2);
  EXPECT_THAT(too_much.err, HasSubstr("samples to compose, more than the 1e+10 allowed"));
  auto missing = Headroom("fleet " + (dir_ / "nope.csv").string());
  EXPECT_EQ(missing.status, 1);
  EXPECT_THAT(missing.err, HasSubstr("nope.csv: cannot open"));
  EXPECT_EQ(Headroom("fleet " + a + ":2 --nameplate-w 400 --windows 1s --risk-window 1s").status,
            0);
}

// An output that is also an input is refused before anything runs, whatever the path says
// (./x, a symlink); the input is left as it was.
TEST_F(Cli, OutputOverAnInputIsRefused) {
  const std::string trace_text = "t_s,gpu,power_w\n0,0,100\n1,0,200\n2,0,300\n";
  const std::string trace = Write("t.csv", trace_text);
  fs::create_symlink("t.csv", dir_ / "link.html");
  const std::string scenario = (dir_ / "s.toml").string();
  fs::copy_file(HEADROOM_SOURCE_DIR "/scenarios/a100-7b-tp1.toml", scenario);
  const std::string scenario_text = Slurp(scenario);
  const std::string d = dir_.string() + "/";
  const struct {
    std::string args, message;
  } cases[] = {
      {"analyze " + trace + " --report " + trace, "--report '" + trace + "' is also TRACE '"},
      {"analyze " + trace + " --report " + d + "link.html", "is also TRACE"},
      {"analyze " + trace + " --report " + d + "./t.csv", "is also TRACE"},
      {"fleet " + trace + ":2 --nameplate-w 400 --report " + trace, "--report '"},
      {"twin calibrate --trace " + trace + " --fit-dynamics --out " + trace, "is also --trace"},
      {"twin run --scenario " + scenario + " --steps 1 --out " + scenario,
       "--out '" + scenario + "' is also --scenario '" + scenario +
           "': refusing to overwrite an input"},
      {"train --scenario a100-7b-tp1," + scenario + " --timesteps 10 --out " + scenario,
       "--out '" + scenario + "' is also --scenario"},
      {"train --scenario a100-7b-tp1 --timesteps 10 --out " + d + "p.json --curve " + d + "p.json",
       "--curve '" + d + "p.json' is also --out"},
      {"eval --scenario " + scenario + " --steps 1 --seeds 1 --report " + scenario,
       "--report '" + scenario + "' is also --scenario"},
      {"eval --scenario a100-7b-tp1 --policy " + trace + " --report " + trace, "is also --policy"},
  };
  for (const auto& c : cases) {
    auto r = Headroom(c.args);
    EXPECT_EQ(r.status, 2) << c.args;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << c.args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  EXPECT_EQ(Slurp(trace), trace_text);
  EXPECT_EQ(Slurp(scenario), scenario_text);
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.html"));
  // The sidecar twin run writes beside its trace counts as an output too.
  const std::string sidecar = d + "o.csv.meta.json";
  fs::copy_file(scenario, sidecar);
  auto r = Headroom("twin run --scenario " + sidecar + " --steps 1 --out " + d + "o.csv");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--out's sidecar '" + sidecar + "' is also --scenario"));
  EXPECT_FALSE(fs::exists(d + "o.csv"));
}

// Outputs go to a symlink's target; the link stays a link.
TEST_F(Cli, OutputsThroughSymlinksKeepTheLink) {
  fs::create_directories(dir_ / "data");
  fs::create_symlink("data/run.csv", dir_ / "run.csv");  // dangling until written
  const std::string out = (dir_ / "run.csv").string();
  ASSERT_EQ(Headroom("twin run --scenario a100-7b-tp1 --steps 1 --out " + out).status, 0);
  EXPECT_TRUE(fs::is_symlink(dir_ / "run.csv"));
  EXPECT_THAT(Slurp(dir_ / "data" / "run.csv"), HasSubstr("t_s,gpu,power_w,phase"));
  const std::string report = Write("r.real.html", "old");
  fs::create_symlink("r.real.html", dir_ / "r.html");
  ASSERT_EQ(Headroom("analyze " + out + " --report " + (dir_ / "r.html").string()).status, 0);
  EXPECT_TRUE(fs::is_symlink(dir_ / "r.html"));
  EXPECT_THAT(Slurp(report), HasSubstr("<svg"));
  size_t temporaries = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_)) {
    temporaries += e.path().string().find(".tmp.") != std::string::npos;
  }
  EXPECT_EQ(temporaries, 0u);
}

// Issue 36, item 1: an output that is a directory or a device is refused with one line and
// left as it is (twin run --out, analyze --report, agent --trace-out: the agent moved a
// directory to DIR.1); /dev/null is written in place.
TEST_F(Cli, OutputsThatAreNotRegularFilesAreRefusedAndLeftAsTheyAre) {
  fs::create_directories(dir_ / "logs" / "kept");
  const std::string logs = (dir_ / "logs").string();
  const std::string line = logs +
                           ": is a directory, not a regular file (outputs go to regular files, "
                           "new paths, /dev/null or /dev/stdout)";
  Outcome run = Headroom("twin run --scenario a100-7b-tp1 --steps 1 --out " + logs);
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr(line));
  Outcome agent = Headroom(
      "agent --source twin --duration-s 1 --speed 0 --listen 127.0.0.1:0 "
      "--trace-out " +
      logs);
  EXPECT_EQ(agent.status, 1);
  EXPECT_THAT(agent.err, HasSubstr("--trace-out " + line));
  EXPECT_TRUE(fs::is_directory(dir_ / "logs" / "kept"));
  EXPECT_FALSE(fs::exists(dir_ / "logs.1"));
  Outcome full = Headroom("twin run --scenario a100-7b-tp1 --steps 1 --out /dev/full");
  EXPECT_EQ(full.status, 1);
  EXPECT_THAT(full.err, HasSubstr("/dev/full: is a character device, not a regular file"));
  EXPECT_EQ(Headroom("twin run --scenario a100-7b-tp1 --steps 1 --out /dev/null").status, 0);
  EXPECT_EQ(Headroom("agent --source twin --duration-s 1 --speed 0 --listen 127.0.0.1:0 "
                     "--trace-out /dev/null")
                .status,
            0);
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  EXPECT_FALSE(fs::exists("/dev/null.1"));
  EXPECT_FALSE(fs::exists("/dev/null.meta.json"));  // no sidecar beside an output in place
}

// Issue 36, item 9: sites-sim --schedule-dir naming a file is refused at once, not after the
// whole simulation.
TEST_F(Cli, SitesSimRefusesAScheduleDirThatIsAFileBeforeItRuns) {
  const std::string signals =
      Write("signals.csv",
            "t_s,spare_w,price_eur_per_mwh,carbon_g_per_kwh\n0,2000,50,100\n3600,2000,50,100\n");
  const std::string file = Write("schedules", "not a directory\n");
  Outcome o = Headroom("sites-sim --site a:" + signals + ":2000 --schedule-dir " + file);
  EXPECT_EQ(o.status, 1);
  EXPECT_THAT(o.err, HasSubstr("--schedule-dir " + file + ": not a directory"));
  EXPECT_THAT(o.err, ::testing::Not(HasSubstr("simulated s")));
}

// Files read whole stop at their bound (before: a config or a password file of /dev/zero read
// until memory ran out); a secret or a config that is a device is not read at all (issue 53,
// item 8). A sparse file of 1 MiB stands for a large one.
TEST_F(Cli, WholeFileReadsStopAtTheirBound) {
  const std::string big = Write("big", "x");
  fs::resize_file(big, 1 << 20);
  Outcome config = Headroom("agent --config " + big);
  EXPECT_EQ(config.status, 1);
  EXPECT_THAT(config.err, HasSubstr("--config " + big + ": larger than 65536 bytes"));
  Outcome password = Headroom(
      "coordinator --site s --etcd http://127.0.0.1:9 --etcd-user u --etcd-password-file " + big +
      " --site-budget-w 1000");
  EXPECT_EQ(password.status, 1);
  EXPECT_THAT(password.err, HasSubstr("--etcd-password-file " + big + ": larger than 65536 bytes"));
  Outcome prom_token = Headroom(
      "analyze prometheus://127.0.0.1:9 --query q --start 0 --end 1 --prometheus-token-file " +
      big);
  EXPECT_EQ(prom_token.status, 1);
  EXPECT_THAT(prom_token.err,
              HasSubstr("--prometheus-token-file " + big + ": larger than 65536 bytes"));
  Outcome zero = Headroom("agent --config /dev/zero");
  EXPECT_EQ(zero.status, 1);
  EXPECT_EQ(zero.err,
            "headroom: error: --config /dev/zero: is a character device, not a regular file\n");
}

// Issue 53, item 8: a FIFO as --config, --token-file, --etcd-password-file or
// --prometheus-token-file is refused at once with one line (exit 1). Before, each waited for a
// writer forever with no output (a coordinator blocked there ignored SIGTERM for 10 minutes).
// Run under `timeout 20`: a hang is exit 124, not a stuck test.
TEST_F(Cli, AFifoAsAConfigOrASecretIsRefusedAtOnce) {
  const std::string fifo = (dir_ / "secret.fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const struct {
    std::string args;
    std::string flag;
  } cases[] = {
      {"agent --config " + fifo, "--config"},
      {"agent --source twin --speed 0 --duration-s 1 --listen 127.0.0.1:0 --token-file " + fifo,
       "--token-file"},
      {"coordinator --site s --etcd http://127.0.0.1:9 --site-budget-w 1000 --listen 127.0.0.1:0 "
       "--etcd-user u --etcd-password-file " +
           fifo,
       "--etcd-password-file"},
      {"coordinator --config " + fifo, "--config"},
      {"analyze prometheus://127.0.0.1:9 --query q --start 0 --end 1 --prometheus-token-file " +
           fifo,
       "--prometheus-token-file"},
  };
  for (const auto& c : cases) {
    const auto start = std::chrono::steady_clock::now();
    Outcome r = Headroom("timeout 20 " + c.args, /*wrapped=*/true);
    const double took_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(r.status, 1) << c.args << ": " << r.err;
    EXPECT_EQ(r.err,
              "headroom: error: " + c.flag + " " + fifo + ": is a FIFO, not a regular file\n")
        << c.args;
    EXPECT_LT(took_s, 10.0) << c.args;
  }
}

// Issue 53, item 4: under systemd the units pass the secrets as credentials (LoadCredential=),
// which a DynamicUser= service can read where it cannot read the root-owned originals. A token
// in $CREDENTIALS_DIRECTORY is the coordinator's when its configuration names none: here
// --token-on-reads, which needs a token, passes and the start goes on to etcd (unreachable).
TEST_F(Cli, TheCoordinatorTakesItsTokenFromASystemdCredential) {
  const fs::path creds = dir_ / "credentials";
  fs::create_directories(creds);
  const std::string run = std::string(HEADROOM_BINARY) +
                          " coordinator --site s --etcd http://127.0.0.1:9 --site-budget-w 1000 "
                          "--listen 127.0.0.1:0 --token-on-reads";
  Outcome without = Headroom("CREDENTIALS_DIRECTORY=" + creds.string() + " timeout 20 " + run,
                             /*wrapped=*/true);
  EXPECT_EQ(without.status, 2);
  EXPECT_THAT(without.err, HasSubstr("--token-on-reads needs a token"));
  std::ofstream(creds / "token") << "s3cr3t-t0ken-0123456789\n";
  Outcome with = Headroom("CREDENTIALS_DIRECTORY=" + creds.string() + " timeout 20 " + run,
                          /*wrapped=*/true);
  EXPECT_EQ(with.status, 1) << with.err;
  EXPECT_THAT(with.err, HasSubstr("--token-file from the systemd credential 'token' (" +
                                  (creds / "token").string() + ")"));
  EXPECT_THAT(with.err, HasSubstr("cannot reach etcd at start"));
  EXPECT_THAT(with.err, Not(HasSubstr("needs a token")));
}

// Issue 53, item 3: a renamed key in --config overrode the command line's new name:
// `fleet-fail-open = true` ran the agent fail-open under --site-fail-open=false. The command
// line wins by either name; the renamed key still warns, once. (etcd is unreachable here: the
// agent holds at its standby and stops after its 2 s.)
TEST_F(Cli, TheCommandLineWinsOverARenamedKeyInTheConfig) {
  const std::string config = Write("agent.toml",
                                   "fleet-fail-open = true\n"
                                   "fleet = \"etcd://not a host:1\"\n");
  const std::string run =
      "timeout 60 agent --source twin --scenario a100-7b-tp1 --controller pid --speed 0 "
      "--duration-s 2 --listen 127.0.0.1:0 --site-etcd etcd://127.0.0.1:9 --site s --job j "
      "--lease-ttl-s 3 --config " +
      config;
  Outcome r = Headroom(run + " --site-fail-open=false", /*wrapped=*/true);
  EXPECT_EQ(r.status, 0) << r.err;  // --site-etcd from the command line, not the file's
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("--site-fail-open: not admitted")));
  const auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(r.err, "--fleet-fail-open is deprecated: use --site-fail-open"), 1u) << r.err;
  EXPECT_EQ(count(r.err, "--fleet is deprecated: use --site-etcd"), 1u) << r.err;
  // Without the flag on the command line the file's key counts, fail-open and all.
  r = Headroom(run, /*wrapped=*/true);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--site-fail-open: not admitted"));
}

// Issue 53, item 7: a TOML boolean is not a number (toml++ read `true` as 1: the agent ran at
// 1 W).
TEST_F(Cli, ATomlBooleanIsNotANumber) {
  const std::string config = Write("b.toml",
                                   "source = \"twin\"\nbudget-w = true\nspeed = 0\n"
                                   "duration-s = 1\nlisten = \"127.0.0.1:0\"\n");
  Outcome r = Headroom("timeout 20 agent --config " + config, /*wrapped=*/true);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "headroom: error: " + config +
                       ":2: key 'budget-w': expected a number, not a boolean\n");
}

// Issue 53, item 6: with --log-format json the fatal error is a JSON line too, from the command
// line or from --config.
TEST_F(Cli, TheFatalErrorIsAJsonLineWhenLogsAreJson) {
  for (const std::string& args :
       {std::string("agent --source twin --log-format json --listen nowhere"),
        "agent --source twin --listen nowhere --config " +
            Write("j.toml", "log-format = \"json\"\n"),
        std::string("coordinator --log-format json --etcd http://127.0.0.1:9 --site s "
                    "--site-budget-w 1000 --listen nowhere")}) {
    Outcome r = Headroom(args);
    EXPECT_EQ(r.status, 2) << args;
    ASSERT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    const auto j = nlohmann::json::parse(r.err, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << r.err;
    EXPECT_EQ(j["level"], "error");
    EXPECT_EQ(j["daemon"], args.substr(0, args.find(' ')));
    EXPECT_THAT(j["msg"].get<std::string>(), HasSubstr("--listen: 'nowhere': expected HOST:PORT"));
    EXPECT_EQ(j["exit_status"], 2);
  }
  Outcome text = Headroom("agent --source twin --listen nowhere");
  EXPECT_THAT(text.err, ::testing::StartsWith("headroom: error: --listen: 'nowhere'"));
}

// Issue 53, items 9 and 10: etcds://http://... is refused (it connected over plain HTTP); a
// world-readable etcd password file is said, as a token file is.
TEST_F(Cli, EtcdUrlsAndSecretsAreChecked) {
  Outcome r = Headroom(
      "agent --source twin --speed 0 --duration-s 1 --listen 127.0.0.1:0 --site s --job j "
      "--site-etcd etcds://http://127.0.0.1:9");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("etcds:// names the scheme of the whole list"));
  // TLS files are regular files too: a FIFO would hang TLS's read at start.
  const std::string fifo = (dir_ / "ca.fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  r = Headroom(
      "timeout 20 agent --source twin --speed 0 --duration-s 1 --listen 127.0.0.1:0 --site s "
      "--job j --site-etcd etcds://127.0.0.1:9 --etcd-cacert " +
          fifo,
      /*wrapped=*/true);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "headroom: error: --etcd-cacert " + fifo + ": is a FIFO, not a regular file\n");
  const std::string password = Write("pw", "s3cret\n");
  fs::permissions(password,
                  fs::perms::owner_read | fs::perms::owner_write | fs::perms::others_read);
  r = Headroom(
      "coordinator --site s --etcd http://127.0.0.1:9 --site-budget-w 1000 --listen 127.0.0.1:0 "
      "--etcd-user u --etcd-password-file " +
      password);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("WARN headroom coordinator: --etcd-password-file " + password +
                               " is readable by other users (chmod 600 it)"));
  EXPECT_THAT(r.err, HasSubstr("cannot reach etcd"));
  fs::permissions(password, fs::perms::owner_read | fs::perms::owner_write);
  r = Headroom(
      "coordinator --site s --etcd http://127.0.0.1:9 --site-budget-w 1000 --listen 127.0.0.1:0 "
      "--etcd-user u --etcd-password-file " +
      password);
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("readable by other users")));
}

// SIGTERM while twin run writes: no temporary file left, and the status says "killed by
// SIGTERM". The signal is sent once the temporary file exists (polled, with a deadline).
TEST_F(Cli, SigtermDuringTwinRunLeavesNoTemporaryFile) {
  const std::string out = (dir_ / "long.csv").string();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    execl(HEADROOM_BINARY, HEADROOM_BINARY, "twin", "run", "--scenario", "a100-7b-tp1",
          "--duration-s", "1000000", "--out", out.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto temporary = [&] {
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().filename().string().starts_with("long.csv.tmp.")) return true;
    }
    return false;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!temporary() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling, not synchronising
  }
  ASSERT_TRUE(temporary()) << "no temporary file within 60 s";
  kill(child, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_FALSE(temporary());
  EXPECT_FALSE(fs::exists(out));
}

// Outputs that cannot fit are refused before anything is written, with one line.
TEST_F(Cli, OutputLargerThanTheFreeSpaceIsRefused) {
  const std::string out = (dir_ / "huge.csv").string();
  // Under `timeout`: a binary that does not check would fill the disk.
  auto r = Headroom(
      "timeout 20 synth --gpus 4096 --duration-s 10000000 --interval-s 0.001 --out " + out, true);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("headroom: error: synth: about 1.3 PB to write to " + out +
                               ", but its file system has "));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 2);  // std*
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

TEST_F(Cli, TwinRunWritesATraceAnalyzeReadsAsIs) {
  EXPECT_THAT(Headroom("twin scenarios").out, HasSubstr("a100-72b-tp4"));
  const std::string out = (dir_ / "twin.csv").string();
  auto run = Headroom("twin run --scenario a100-7b-tp1 --steps 2 --seed 3 --out " + out);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_TRUE(fs::exists(out + ".meta.json"));
  EXPECT_THAT(Slurp(out).substr(0, 80),
              HasSubstr("t_s,gpu,power_w,phase,step,tokens,concurrency,group_size"));
  auto a = Headroom("analyze " + out + " --json");
  ASSERT_EQ(a.status, 0) << a.err;
  const auto j = nlohmann::json::parse(a.out);
  EXPECT_EQ(j["gpus"], 1);
  EXPECT_DOUBLE_EQ(j["nameplate_w"].get<double>(), 400.0);
  EXPECT_GT(j["tokens"].get<double>(), 0.0);
  // Same seed, same trace.
  const std::string again = (dir_ / "again.csv").string();
  ASSERT_EQ(Headroom("twin run --scenario a100-7b-tp1 --steps 2 --seed 3 --out " + again).status,
            0);
  EXPECT_EQ(Slurp(out), Slurp(again));
}

TEST_F(Cli, TwinErrors) {
  const std::string out = (dir_ / "x.csv").string();
  EXPECT_EQ(Headroom("twin run --scenario a100-7b-tp1 --out " + out).status, 2);  // no length
  auto unknown = Headroom("twin run --scenario nope --steps 1 --out " + out);
  EXPECT_EQ(unknown.status, 2);
  EXPECT_THAT(unknown.err, HasSubstr("no scenario 'nope'"));
  const std::string bad = Write("bad.toml", "[scenario]\nname = \"x\"\n[job]\ngpus = 0\n");
  auto r = Headroom("twin run --scenario " + bad + " --steps 1 --out " + out);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("bad.toml:4:8: key 'job.gpus': 0 is out of range"));
  EXPECT_FALSE(fs::exists(out));
  const std::string csv =
      Write("ml.csv",
            "task,model_id,gpu_model,num_gpus,tensor_parallel,avg_batch_size,"
            "avg_power_per_gpu_w,output_tok_per_s\nchat,m,H100,1,1,8,400,100\n");
  const std::string params = (dir_ / "p.toml").string();
  auto c = Headroom("twin calibrate --mlenergy " + csv + " --model m --gpu H100 --out " + params);
  EXPECT_EQ(c.status, 1);
  EXPECT_THAT(c.err, HasSubstr("too few ML.ENERGY rows"));
  EXPECT_FALSE(fs::exists(params));
  const std::string trace = Write("t.csv", "t_s,gpu,power_w\n0,0,1\n1,0,2\n");
  auto d = Headroom("twin calibrate --trace " + trace + " --fit-dynamics --out " + params);
  EXPECT_EQ(d.status, 1);
  EXPECT_THAT(d.err, HasSubstr("no concurrency column"));
  EXPECT_FALSE(fs::exists(params));
}

TEST_F(Cli, TwinAuthorityJson) {
  auto r = Headroom("twin authority --scenario a100-72b-tp4-grpo --steps 2 --seeds 1 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["scenario"], "a100-72b-tp4-grpo");
  ASSERT_EQ(j["actuators"].size(), 3u);
  for (const auto& a : j["actuators"]) {
    for (const char* key : {"name", "range", "rollout_power_change_pct", "step_time_change_pct",
                            "tokens_per_s_change_pct"}) {
      EXPECT_TRUE(a.contains(key)) << key;
    }
  }
  EXPECT_EQ(j["actuators"][0]["name"], "concurrency");
  EXPECT_EQ(j["actuators"][0]["range"], nlohmann::json::array({4.0, 8.0}));
}

TEST_F(Cli, TrainThenEvalWithThePolicy) {
  const std::string policy = (dir_ / "p.json").string();
  auto t =
      Headroom("train --scenario a100-7b-tp1 --timesteps 2000 --envs 2 --seed 3 --out " + policy);
  ASSERT_EQ(t.status, 0) << t.err;
  EXPECT_TRUE(fs::exists(policy));
  const std::string curve = Slurp(dir_ / "p.curve.csv");
  EXPECT_THAT(curve, HasSubstr("iteration,timesteps,steps_per_s,return,tokens_reward,"
                               "violation_rate,approx_kl,clip_fraction,explained_variance"));
  const auto pj = nlohmann::json::parse(Slurp(policy));
  EXPECT_EQ(pj["format"], "headroom-policy");
  EXPECT_EQ(pj["version"], 4);
  ASSERT_EQ(pj["envelopes"].size(), 1u);
  EXPECT_EQ(pj["envelopes"][0]["scenario"], "a100-7b-tp1");
  // The scenario's range (scenarios/a100-7b-tp1.toml: budget.range_w).
  EXPECT_EQ(pj["envelopes"][0]["budget_range_w"], nlohmann::json::array({260.0, 400.0}));
  EXPECT_EQ(pj["heads"], nlohmann::json::array({5, 5, 5}));
  EXPECT_EQ(pj["phases"][1], "startup");
  EXPECT_EQ(pj["shield"]["sustain"], 2);
  EXPECT_THAT(pj["command"].get<std::string>(), HasSubstr("--timesteps 2000"));

  const std::string report = (dir_ / "eval.html").string();
  auto e = Headroom(
      "eval --scenario a100-7b-tp1 --controllers uncontrolled,static-safe,ppo "
      "--policy " +
      policy + " --seeds 2 --steps 3 --json --report " + report);
  ASSERT_EQ(e.status, 0) << e.err;
  const auto j = nlohmann::json::parse(e.out);
  EXPECT_EQ(j["scenario"], "a100-7b-tp1");
  EXPECT_EQ(j["budget_w"], 314.6);
  EXPECT_EQ(j["seeds"], 2);
  EXPECT_EQ(j["steps"], 3);
  ASSERT_EQ(j["controllers"].size(), 3u);
  for (const auto& c : j["controllers"]) {
    for (const char* key :
         {"name", "violation_fraction", "tokens", "energy_j", "tokens_per_mwh",
          "tokens_vs_uncontrolled_pct", "tokens_vs_static_safe_pct",
          "violations_vs_uncontrolled_pct", "tokens_per_mwh_vs_uncontrolled_pct"}) {
      EXPECT_TRUE(c.contains(key)) << key;
    }
    for (const char* w : {"0.5s", "30s", "5min"}) {
      EXPECT_TRUE(c["violation_fraction"][w].contains("mean")) << w;
      EXPECT_TRUE(c["violation_fraction"][w].contains("std")) << w;
    }
  }
  EXPECT_EQ(j["controllers"][2]["name"], "ppo");
  EXPECT_THAT(Slurp(report), HasSubstr("<svg"));
}

// A version-3 policy (no envelopes) is refused where it would run, naming the upgrade; the
// upgrade writes it again with the envelope of the scenario it was trained on (version 3 knew
// only the scenario's range): a shipped policy trained so comes back byte for byte.
TEST_F(Cli, PolicyUpgradeMakesAVersion3PolicyCurrent) {
  const std::string shipped =
      std::string(HEADROOM_SOURCE_DIR) + "/policies/a100-7b-tp1-fixed-group.json";
  nlohmann::json v3 = nlohmann::json::parse(Slurp(shipped));
  v3["version"] = 3;
  v3.erase("envelopes");
  const std::string old = Write("v3.json", v3.dump(1) + "\n");
  auto r = Headroom("agent --source twin --controller ppo --policy " + old +
                    " --speed 0 --duration-s 1 --listen 127.0.0.1:0");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr(old + ": key 'version': 3: it predates the envelopes"));
  const std::string upgraded = (dir_ / "v4.json").string();
  r = Headroom("policy upgrade " + old + " " + upgraded);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(Slurp(upgraded), Slurp(shipped));
  r = Headroom("policy show " + upgraded);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("a100-7b-tp1"));
  EXPECT_THAT(r.out, HasSubstr("260.0-400.0"));
  // Over its own input: refused, nothing written.
  r = Headroom("policy upgrade " + old + " " + old);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(nlohmann::json::parse(Slurp(old))["version"], 3);
}

TEST_F(Cli, EvalRefusesBadInputBeforeRunning) {
  auto r = Headroom("eval --scenario a100-7b-tp1 --controllers uncontrolled,bang-bang");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown controller 'bang-bang'"));
  r = Headroom("eval --scenario a100-7b-tp1 --budget-w 900");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("900 W is outside scenario 'a100-7b-tp1''s budget range"));
  r = Headroom("eval --scenario a100-7b-tp1 --controllers ppo");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("'ppo' needs --policy"));
  const std::string old = Write("old.json", R"({"format": "headroom-policy", "version": 0})");
  r = Headroom("eval --scenario a100-7b-tp1 --controllers ppo --policy " + old);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr(old + ": key 'version': 0"));
  r = Headroom("eval --scenario h100-8b-ddp-train");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("has no rollout"));
  r = Headroom("train --scenario a100-7b-tp1 --budget-w 10 --timesteps 10 --out " +
               (dir_ / "x.json").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_FALSE(fs::exists(dir_ / "x.json"));
  r = Headroom("train --scenario a100-7b-tp1 --budget-w 300 --site-range --timesteps 10 --out " +
               (dir_ / "x.json").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("excludes --site-range"));
  EXPECT_FALSE(fs::exists(dir_ / "x.json"));
}

// --site-range: the budgets a site hands out, from the GPUs' lowest power limit (the job's
// floor with the guard: scenarios/a100-7b-tp1.toml's power_limit.min_w, 100 W) to the top of the
// scenario's range (400 W), carried in the policy's envelope.
TEST_F(Cli, TrainOverASitesRangeDownToTheLowestLimit) {
  const std::string policy = (dir_ / "site.json").string();
  auto t = Headroom("train --scenario a100-7b-tp1 --site-range --timesteps 500 --envs 2 --out " +
                    policy);
  ASSERT_EQ(t.status, 0) << t.err;
  const auto pj = nlohmann::json::parse(Slurp(policy));
  EXPECT_EQ(pj["envelopes"][0]["budget_range_w"], nlohmann::json::array({100.0, 400.0}));
  EXPECT_THAT(pj["trained_budget"].get<std::string>(), HasSubstr("a site's range"));
  // The command it records runs again: a flag is its name alone.
  const std::string command = pj["command"].get<std::string>();
  EXPECT_THAT(command, HasSubstr("--site-range --timesteps 500"));
  auto again = Headroom(command.substr(std::string("headroom ").size()) + " --seed 2");
  EXPECT_EQ(again.status, 0) << again.err;
}

TEST_F(Cli, AgentRunsOnTheTwinFromAConfigFile) {
  const std::string trace = (dir_ / "agent.csv").string();
  const std::string config = Write("agent.toml",
                                   "source = \"twin\"\nscenario = \"a100-7b-tp1\"\n"
                                   "controller = \"pid\"\nspeed = 0\n"
                                   "duration-s = 60\nlisten = \"127.0.0.1:0\"\n"
                                   "trace-out = \"" +
                                       trace + "\"\n");
  auto r = Headroom("agent --config " + config);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("twin source, pid controller, budget 314.6 W"));
  EXPECT_THAT(r.err, HasSubstr("stopped after 60.0 s, 121 intervals, 0 telemetry errors"));
  auto a = Headroom("analyze " + trace + " --json");
  ASSERT_EQ(a.status, 0) << a.err;
  const auto j = nlohmann::json::parse(a.out);
  EXPECT_EQ(j["samples"], 121);
}

// Calibrate your own machine, end to end: a job's agent trace (the agent beside the twin as the
// "real" job, PID moving concurrency) -> `twin calibrate --trace` (the base from the trace's
// sidecar) -> `train --scenario my.toml` -> the agent runs that policy on it.
TEST_F(Cli, CalibrateFromAnAgentTraceThenTrainThenRunThePolicy) {
  const std::string trace = (dir_ / "job.csv").string();
  auto a = Headroom(
      "agent --source twin --scenario h100-8b-tp1 --controller pid --speed 0 "
      "--duration-s 600 --listen 127.0.0.1:0 --trace-out " +
      trace);
  ASSERT_EQ(a.status, 0) << a.err;
  const std::string mine = (dir_ / "mine.toml").string();
  auto c = Headroom("twin calibrate --trace " + trace + " --out " + mine);
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_THAT(c.out, HasSubstr("base       h100-8b-tp1"));
  EXPECT_THAT(c.out, HasSubstr("train.power_w"));
  const std::string toml = Slurp(mine);
  EXPECT_THAT(toml, HasSubstr("name = \"mine\""));
  EXPECT_THAT(toml, HasSubstr("# Calibrated by `headroom twin calibrate --trace"));
  const std::string policy = (dir_ / "mine.json").string();
  auto t =
      Headroom("train --scenario " + mine + " --timesteps 2000 --envs 2 --seed 3 --out " + policy);
  ASSERT_EQ(t.status, 0) << t.err;
  auto r = Headroom("agent --source twin --scenario " + mine + " --controller ppo --policy " +
                    policy + " --speed 0 --duration-s 30 --listen 127.0.0.1:0");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("ppo controller"));
  // A trace that is not an agent's: one line naming the file and what is missing; nothing
  // written.
  const std::string plain = Write("plain.csv", "t_s,gpu,power_w\n0,0,100\n0.5,0,110\n");
  auto bad = Headroom("twin calibrate --trace " + plain + " --base h100-8b-tp1 --out " +
                      (dir_ / "bad.toml").string());
  EXPECT_EQ(bad.status, 1);
  EXPECT_THAT(bad.err, HasSubstr(plain + ": no step column"));
  EXPECT_FALSE(fs::exists(dir_ / "bad.toml"));
}

// The coordinator's --config: the agent's rules (keys = flags, strict, file:line:key errors); the
// three it needs from either place.
TEST_F(Cli, CoordinatorTakesItsOptionsFromAConfigFile) {
  auto r = Headroom("coordinator --listen 127.0.0.1:0");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--etcd is required (on the command line or in --config)"));
  r = Headroom("coordinator --config " +
               Write("a.toml", "etcd = \"http://127.0.0.1:1\"\nsite = \"s\"\nsite_budget = 3\n"));
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err,
              HasSubstr("a.toml:3: key 'site_budget': not an option of headroom coordinator"));
  r = Headroom("coordinator --config " +
               Write("b.toml", "etcd = \"http://127.0.0.1:1\"\nsite = \"s\"\nreserve-w = -1\n"));
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("b.toml:3: key 'reserve-w'"));
  r = Headroom("coordinator --config " + Write("c.toml", "etcd = [\n"));
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("c.toml:"));
  // Every option good (the file's, and --site-budget-w from the command line, which wins):
  // only then is etcd reached, and it is not here.
  r = Headroom("coordinator --site-budget-w 900 --config " +
               Write("d.toml",
                     "etcd = \"http://127.0.0.1:1\"\nsite = \"s\"\nsite-budget-w = 0\n"
                     "listen = \"127.0.0.1:0\"\n"));
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("cannot reach etcd"));
}

TEST_F(Cli, AgentRefusesBadConfigAndOptions) {
  auto r = Headroom("agent --config " + Write("a.toml", "speed = 0\ncontroler = \"pid\"\n"));
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("a.toml:2: key 'controler': not an option of headroom agent"));
  r = Headroom("agent --config " + Write("b.toml", "speed = \"fast\"\n"));
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("b.toml:1: key 'speed'"));
  r = Headroom("agent --config " + Write("c.toml", "speed = [\n"));
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("c.toml:"));
  r = Headroom("agent --listen 127.0.0.1:0 --speed 0 --duration-s 1");  // no --source
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--source is required: nvml"));  // not the twin by default
  r = Headroom("agent --source twin --listen nowhere --speed 0 --duration-s 1");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--listen: 'nowhere': expected HOST:PORT"));
  r = Headroom("agent --source twin --log-format xml --speed 0 --duration-s 1");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--log-format: unknown 'xml' (text, json)"));
  r = Headroom("agent --source twin --controller bang-bang --speed 0 --duration-s 1");
  EXPECT_EQ(r.status, 2);
  r = Headroom(
      "agent --source nvml --nvml-library /nonexistent/libnvidia-ml.so.1 --speed 0 "
      "--duration-s 1 --listen 127.0.0.1:0");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("nvml: cannot load /nonexistent/libnvidia-ml.so.1"));
}

// Issue 35: every line of a daemon's log with its time and level; as JSON lines, each an object
// with ts, level, daemon, msg and the event's fields (the first: the version and the commit).
TEST_F(Cli, AgentLogLinesAsTextAndAsJsonWithTheirFields) {
  const std::string run =
      "agent --source twin --scenario a100-7b-tp1 --controller pid --speed 0 --duration-s 2 "
      "--listen 127.0.0.1:0 --token s3cr3t-t0ken-0123456789 --trace-out " +
      (dir_ / "agent.csv").string();
  auto r = Headroom(run + " --log-format json");
  ASSERT_EQ(r.status, 0) << r.err;
  std::istringstream lines(r.err);
  std::string line;
  std::vector<nlohmann::json> events;
  while (std::getline(lines, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "not a JSON line: " << line;
    ASSERT_TRUE(j.is_object()) << line;
    EXPECT_THAT(j.value("ts", ""),
                ::testing::MatchesRegex("20[0-9][0-9]-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:"
                                        "[0-6][0-9]\\.[0-9][0-9][0-9]Z"))
        << line;
    EXPECT_EQ(j.value("daemon", ""), "agent") << line;
    EXPECT_THAT(j.value("level", ""), ::testing::AnyOf("info", "warn", "error")) << line;
    events.push_back(j);
  }
  ASSERT_GE(events.size(), 3u) << r.err;
  const auto has = [&](const std::string& level, const std::string& text) {
    return std::any_of(events.begin(), events.end(), [&](const nlohmann::json& e) {
      return e["level"] == level && e["msg"].get<std::string>().find(text) != std::string::npos;
    });
  };
  EXPECT_TRUE(has("warn", "--token is visible to every user")) << r.err;
  const auto first = std::find_if(events.begin(), events.end(), [](const nlohmann::json& e) {
    return e["msg"].get<std::string>().starts_with("version ");
  });
  ASSERT_NE(first, events.end()) << r.err;
  EXPECT_EQ((*first)["level"], "info");
  EXPECT_FALSE((*first)["version"].get<std::string>().empty());
  EXPECT_TRUE(first->contains("commit"));
  EXPECT_EQ((*first)["source"], "twin");
  EXPECT_EQ((*first)["controller"], "pid");
  EXPECT_GT((*first)["budget_per_gpu_w"].get<double>(), 0.0);
  const auto last = events.back();
  EXPECT_TRUE(last["msg"].get<std::string>().starts_with("stopped after")) << r.err;
  EXPECT_TRUE(last["intervals"].is_number_integer()) << last.dump();
  // Text: the same events, one line each, "TIME LEVEL headroom agent: MSG".
  r = Headroom(run);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err,
              ::testing::ContainsRegex("Z WARN headroom agent: --token is visible to every user"));
  EXPECT_THAT(r.err, ::testing::ContainsRegex("Z INFO headroom agent: version "));
}

// Issue 32, F1: in a site a local budget above the floor is watts no ledger holds (an agent
// restarted, or etcd unreachable, acted on it). Refused before anything starts, naming both.
TEST_F(Cli, AgentInASiteRefusesALocalBudgetAboveItsFloor) {
  const std::string site = "--site-etcd etcd://127.0.0.1:1 --site s --job j --node-overhead-w 0 ";
  auto r = Headroom("agent --source twin --scenario a100-7b-tp1 --controller pid --speed 0 " +
                    site + "--floor-w 200 --budget-w 314.6 --duration-s 1 --listen 127.0.0.1:0");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--budget-w 314.6 W per GPU is above the job's floor 200 W"));
  // At or below the floor it runs (etcd unreachable: on that budget, retrying).
  r = Headroom("agent --source twin --scenario a100-7b-tp1 --controller pid --speed 0 " + site +
               "--floor-w 200 --budget-w 200 --duration-s 1 --listen 127.0.0.1:0");
  EXPECT_EQ(r.status, 0) << r.err;
  // The live thing is the site: --fleet, --fleet-log and --fleet-fail-open, its flags' earlier
  // names, work for a release, each said deprecated on one line; --help lists only the new.
  const std::string log = (dir_ / "site.log").string();
  r = Headroom(
      "agent --source twin --scenario a100-7b-tp1 --controller pid --speed 0 --fleet "
      "etcd://127.0.0.1:1 --site s --job j --node-overhead-w 0 --floor-w 200 --budget-w 314.6 "
      "--fleet-log " +
      log + " --fleet-fail-open --duration-s 1 --listen 127.0.0.1:0");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--budget-w 314.6 W per GPU is above the job's floor 200 W"));
  for (const char* note :
       {"--fleet is deprecated: use --site-etcd", "--fleet-log is deprecated: use --site-log",
        "--fleet-fail-open is deprecated: use --site-fail-open"}) {
    EXPECT_THAT(r.err, HasSubstr(note));
  }
  auto help = Headroom("agent --help");
  EXPECT_THAT(help.out, HasSubstr("--site-etcd"));
  EXPECT_THAT(help.out, ::testing::Not(HasSubstr("--fleet")));
}

// Fail closed (issue 32, item 1): etcd unreachable from the start, the job is never admitted,
// so its trainer (the twin) never begins a step: 120 s at standby, held. --site-fail-open
// restores the local budget, and the steps run outside the site's count (a100-7b-tp1's steps
// take 40-65 s: two or more in 120 s).
TEST_F(Cli, AgentInASiteNeverAdmittedHoldsItsTrainerAtStandby) {
  const std::string site = "--site-etcd etcd://127.0.0.1:1 --site s --job j --node-overhead-w 0 ";
  const auto steps_and_phases = [&](const std::string& extra) {
    const std::string trace = (dir_ / "standby.csv").string();
    auto r = Headroom("agent --source twin --scenario a100-7b-tp1 --controller pid --speed 0 " +
                      site + "--floor-w 200 --duration-s 120 --listen 127.0.0.1:0 --trace-out " +
                      trace + " " + extra);
    EXPECT_EQ(r.status, 0) << r.err;
    std::istringstream in(Slurp(trace));
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line, "t_s,gpu,power_w,phase,step,tokens,concurrency,group_size,budget_w");
    int max_step = 0;
    std::set<std::string> phases;
    while (std::getline(in, line)) {
      std::vector<std::string> f;
      std::istringstream fields(line);
      for (std::string x; std::getline(fields, x, ',');) f.push_back(x);
      if (f.size() < 9) continue;
      phases.insert(f[3]);
      max_step = std::max(max_step, std::stoi(f[4]));
    }
    return std::pair{max_step, phases};
  };
  auto [held_steps, held_phases] = steps_and_phases("--standby-w 60");
  EXPECT_EQ(held_steps, 0);
  EXPECT_EQ(held_phases, (std::set<std::string>{"startup", "idle"}));
  auto [open_steps, open_phases] = steps_and_phases("--site-fail-open");
  EXPECT_GE(open_steps, 1);
  EXPECT_TRUE(open_phases.contains("rollout"));
}

TEST_F(Cli, AgentGuardRestoresPowerLimitsOnExitAndOnSigterm) {
  const std::string log = (dir_ / "limits.log").string();
  const std::string env =
      "FAKE_NVML_GPUS=2 FAKE_NVML_POWER_MW=350000 FAKE_NVML_LIMIT_MW=400000 "
      "FAKE_NVML_LIMIT_LOG=" +
      log + " ";
  const std::string agent = std::string(HEADROOM_BINARY) +
                            " agent --source nvml --nvml-library " FAKE_NVML_PATH
                            " --guard-power-limit --budget-w 300 --listen 127.0.0.1:0"
                            " --guard-state " +
                            (dir_ / "guard-state.json").string();
  // Normal end: set to the budget after sustained excess, then restored.
  ASSERT_EQ(std::system((env + agent + " --speed 0 --duration-s 5 2>/dev/null").c_str()), 0);
  EXPECT_EQ(Slurp(log), "0 300000\n1 300000\n0 400000\n1 400000\n");
  // SIGTERM (from timeout) while running in real time x10: restored, exit 0.
  fs::remove(log);
  const int raw = std::system(
      (env + "timeout --preserve-status -s TERM 3 " + agent + " --speed 10 2>/dev/null").c_str());
  EXPECT_TRUE(WIFEXITED(raw) && WEXITSTATUS(raw) == 0);
  EXPECT_EQ(Slurp(log), "0 300000\n1 300000\n0 400000\n1 400000\n");
  auto r = Headroom("agent --source twin --guard-power-limit --speed 0 --duration-s 1");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--guard-power-limit needs --source nvml"));
  // --gpus: the guard touches only the job's GPUs (NVML 1 here, of 2), and only nvml has GPUs
  // to choose.
  fs::remove(log);
  ASSERT_EQ(std::system((env + agent + " --gpus 1 --speed 0 --duration-s 5 2>/dev/null").c_str()),
            0);
  EXPECT_EQ(Slurp(log), "1 300000\n1 400000\n");
  r = Headroom("agent --source twin --gpus 0,1 --speed 0 --duration-s 1 --listen 127.0.0.1:0");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--gpus needs --source nvml"));
}

}  // namespace
