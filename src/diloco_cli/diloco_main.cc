// `headroom diloco`: elastic low-communication training (docs/DILOCO.md). Its own executable,
// headroom-diloco, so that libtorch stays out of `headroom` (the agent above all): `headroom
// diloco ARGS` executes `headroom-diloco ARGS` from the same directory.
//
//   worker   one DiLoCo worker on an etcd run
//   ddp      one data-parallel worker (the baseline: fp32 gradients all-reduced every step)
//   eval     a checkpoint's validation loss and bits per byte
//   control  what a worker is asked at run time: threads, duty, leave
//   replay   a run's arithmetic for a membership schedule, in one process
//   local    its own etcd and N worker processes on this machine, one summary
//
// Exit status (cli_main/command_main.h): 0 success, 1 runtime or input error, 2 usage error.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <map>

#include "build_info/build_info.h"
#include "cli_main/command_main.h"
#include "diloco_cli/diloco_args.h"

int main(int argc, char** argv) {
  namespace cli = headroom::cli;
  namespace diloco_cli = headroom::diloco_cli;
  CLI::App app{"headroom diloco: elastic low-communication training on etcd and Gloo"};
  app.set_version_flag("--version", fmt::format("headroom-diloco {} (commit {})",
                                                headroom::Version(), headroom::Commit()));
  app.require_subcommand(1);
  std::map<CLI::App*, cli::Command> commands;
  const auto add = [&](const char* name, const char* description, auto setup) {
    CLI::App* sub = app.add_subcommand(name, description);
    commands[sub] = setup(*sub);
  };
  add("worker", "One DiLoCo worker of a run on etcd",
      [](CLI::App& sub) { return diloco_cli::SetupWorker(sub, "diloco"); });
  add("ddp", "One data-parallel worker (the baseline)",
      [](CLI::App& sub) { return diloco_cli::SetupWorker(sub, "ddp"); });
  add("eval", "A checkpoint's validation loss and bits per byte", diloco_cli::SetupEval);
  add("control", "Ask a worker, at run time: threads, duty, leave", diloco_cli::SetupControl);
  add("replay", "A run's arithmetic for a membership schedule (round,workers), in one process",
      diloco_cli::SetupReplay);
  add("local", "Its own etcd and N worker processes, one summary", diloco_cli::SetupLocal);
  return cli::ParseAndRun(app, argc, argv, "headroom diloco", "headroom: error: diloco", commands);
}
