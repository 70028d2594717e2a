// headroom: power-budget control and headroom analysis for AI training.
//
// Exit status: 0 success, 1 runtime or input error, 2 usage error.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "build_info/build_info.h"
#include "cli/commands.h"
#include "cli/daemon_log.h"
#include "cli_main/command_main.h"

namespace {

using headroom::cli::kExitError;
using headroom::cli::kExitUsage;
using headroom::cli::ParseAndRun;

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

// Edits (insertions, deletions, substitutions) from a to b.
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// "unknown command 'analize' (did you mean 'analyze'?)", or the list of commands when none is
// within two edits.
std::string UnknownCommand(std::string_view name, const std::vector<std::string>& commands) {
  std::string best;
  size_t best_d = 3;
  for (const std::string& c : commands) {
    if (const size_t d = EditDistance(name, c); d < best_d) best = c, best_d = d;
  }
  if (!best.empty()) return fmt::format("unknown command '{}' (did you mean '{}'?)", name, best);
  return fmt::format("unknown command '{}' (commands: {})", name, fmt::join(commands, ", "));
}

// Every command path ("headroom", "headroom/twin", "headroom/twin/run") with the words that may
// follow it: its commands, then its options.
void CompletionWords(const CLI::App& app, const std::string& path,
                     std::vector<std::pair<std::string, std::string>>* out) {
  std::vector<std::string> words;
  for (const CLI::App* sub : app.get_subcommands({})) words.push_back(sub->get_name());
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& name : opt->get_lnames()) words.push_back("--" + name);
  }
  out->emplace_back(path, fmt::format("{}", fmt::join(words, " ")));
  for (const CLI::App* sub : app.get_subcommands({})) {
    CompletionWords(*sub, path + "/" + sub->get_name(), out);
  }
}

// `headroom completion bash`: commands and options by where the line is; a word that names no
// command (an option's value) is stepped over; files for the rest (-o default).
std::string BashCompletion(const CLI::App& app) {
  std::vector<std::pair<std::string, std::string>> words;
  CompletionWords(app, "headroom", &words);
  std::string table;
  for (const auto& [path, list] : words) table += fmt::format("    [{}]=\"{}\"\n", path, list);
  return fmt::format(
      "# bash completion for headroom (headroom completion bash)\n"
      "_headroom() {{\n"
      "  local -A words=(\n{}  )\n"
      "  local path=headroom i w\n"
      "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
      "    w=${{COMP_WORDS[i]}}\n"
      "    if [[ $w != -* && -n ${{words[$path/$w]+x}} ]]; then path=$path/$w; fi\n"
      "  done\n"
      "  COMPREPLY=($(compgen -W \"${{words[$path]}}\" -- \"${{COMP_WORDS[COMP_CWORD]}}\"))\n"
      "}}\n"
      "complete -o default -F _headroom headroom\n",
      table);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "diloco") return ExecDiloco(argc, argv);
  CLI::App app{
      "headroom: keep AI training inside a power budget, and measure the headroom the "
      "installed power already has."};
  app.set_version_flag(
      "--version", fmt::format("headroom {} (commit {})", headroom::Version(), headroom::Commit()));
  app.require_subcommand(1);
  app.fallthrough(false);
  // Every --help shows each option's default (the value it holds before parsing).
  app.option_defaults()->always_capture_default();

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
  add("policy", "What a trained policy carries (show), and older policies made current (upgrade)",
      headroom::cli::SetupPolicy);
  // Listed for --help only: `headroom diloco` is taken before parsing (ExecDiloco).
  app.add_subcommand("diloco",
                     "Elastic low-communication training on etcd and Gloo (worker, ddp, eval, "
                     "local)");

  std::string shell;
  CLI::App* completion = app.add_subcommand("completion",
                                            "Print a shell completion script (bash): "
                                            "source <(headroom completion bash)");
  completion->add_option("shell", shell, "The shell")->required()->check(CLI::IsMember({"bash"}));

  if (argc >= 2 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      fmt::print(stderr, "headroom: error: {}\n", UnknownCommand(argv[1], names));
      return kExitUsage;
    }
  }
  commands[completion] = [&app] {
    fmt::print("{}", BashCompletion(app));
    return headroom::OkStatus();
  };
  // A daemon given --log-format json says its fatal error as a JSON line too.
  return ParseAndRun(app, argc, argv, "headroom", "headroom: error", commands,
                     headroom::cli::FatalJsonLine);
}
