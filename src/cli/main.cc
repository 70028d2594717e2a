// headroom: power-budget control and headroom analysis for AI training.
//
// Exit status: 0 success, 1 runtime or input error, 2 usage error.
#include <fmt/format.h>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

// A message on one line: newlines and other control bytes (CLI11's own, or inside an argument
// it quotes) become spaces.
std::string OneLine(std::string text) {
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

// `headroom diloco ARGS` runs `headroom-diloco ARGS` from this executable's directory: the
// training (libtorch) lives in its own executable, out of `headroom` and the agent.
int ExecDiloco(int argc, char** argv) {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string path =
      (ec ? std::filesystem::path(".") : exe.parent_path()) / "headroom-diloco";
  std::vector<char*> args = {const_cast<char*>(path.c_str())};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(path.c_str(), args.data());
  fmt::print(stderr, "headroom: error: diloco: cannot run {}: {}\n", path, std::strerror(errno));
  return kExitError;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "diloco") return ExecDiloco(argc, argv);
  CLI::App app{
      "headroom: keep AI training inside a power budget, and measure the headroom the "
      "installed power already has."};
  app.set_version_flag("--version", std::string("headroom ") + HEADROOM_VERSION);
  app.require_subcommand(1);
  app.fallthrough(false);

  std::map<CLI::App*, headroom::cli::Command> commands;
  const auto add = [&](const char* name, const char* description, auto setup) {
    CLI::App* sub = app.add_subcommand(name, description);
    commands[sub] = setup(*sub);
  };
  add("analyze", "Statistics of a power trace at every window: violations, energy, ramps, spectrum",
      headroom::cli::SetupAnalyze);
  add("fleet",
      "Compose job traces into a fleet: peaks vs nameplate, oversubscription, money, carbon",
      headroom::cli::SetupFleet);
  add("synth", "Write a synthetic GRPO-like training trace (for demos and benchmarks)",
      headroom::cli::SetupSynth);
  add("twin", "The digital twin of GRPO training power: run, authority, calibrate, scenarios",
      headroom::cli::SetupTwin);
  add("train", "Train the PPO meta-controller in the twin (writes a policy JSON)",
      headroom::cli::SetupTrain);
  add("eval", "Controllers side by side on the same seeds: violations, tokens, energy",
      headroom::cli::SetupEval);
  add("agent", "Live power control beside a training job: telemetry, decisions, an HTTP API",
      headroom::cli::SetupAgent);
  add("coordinator",
      "One replica of a site's coordinator: one site budget shared by every job on every node",
      headroom::cli::SetupCoordinator);
  add("fleet-sim", "A site on one machine: a coordinator and twin-mode agents in one process",
      headroom::cli::SetupFleetSim);
  add("sites-sim", "One DiLoCo run on several sites' spare power, placed by carbon, price or spare",
      headroom::cli::SetupSitesSim);
  add("pilot", "Design and judge a site pilot of the controller: plan, report, validate",
      headroom::cli::SetupPilot);
  // Listed for --help only: `headroom diloco` is taken before parsing (ExecDiloco).
  app.add_subcommand("diloco",
                     "Elastic low-communication training on etcd and Gloo (worker, ddp, eval, "
                     "local)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print as CLI11 prints them; every other parse error is one line.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      app.exit(e);
      return kExitOk;
    }
    fmt::print(stderr, "headroom: error: {}\n", OneLine(e.what()));
    return kExitUsage;
  }

  for (const auto& [sub, run] : commands) {
    if (!sub->parsed()) continue;
    const headroom::Status status = run();
    if (status) return kExitOk;
    fmt::print(stderr, "headroom: error: {}\n", OneLine(status.error().message()));
    return status.error().kind() == headroom::ErrorKind::kUsage ? kExitUsage : kExitError;
  }
  return kExitUsage;
}
