#include "cli_main/command_main.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <exception>
#include <vector>

namespace headroom::cli {

std::string OneLine(std::string text) {
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

int ExitCodeOf(const Status& status) {
  if (status) return kExitOk;
  return status.error().kind() == ErrorKind::kUsage ? kExitUsage : kExitError;
}

int ParseAndRun(CLI::App& app, int argc, char** argv, const std::string& path,
                const std::string& prefix, const std::map<CLI::App*, Command>& commands,
                const FatalLine& fatal_line) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      app.exit(e);
      return kExitOk;
    }
    // A command with commands of its own and none given: name them.
    const CLI::App* at = &app;
    std::string where = path;
    for (bool deeper = true; deeper;) {
      deeper = false;
      for (const CLI::App* sub : at->get_subcommands()) {
        at = sub;
        where += " " + sub->get_name();
        deeper = true;
        break;
      }
    }
    const auto subs = at->get_subcommands({});
    if (!subs.empty() && at->get_subcommands().empty()) {
      std::vector<std::string> names;
      for (const CLI::App* sub : subs) names.push_back(sub->get_name());
      fmt::print(stderr, "headroom: error: {} needs a command: {} ({} --help)\n", where,
                 fmt::join(names, ", "), where);
      return kExitUsage;
    }
    fmt::print(stderr, "{}: {}\n", prefix, OneLine(e.what()));
    return kExitUsage;
  }
  for (const auto& [sub, run] : commands) {
    if (!sub->parsed()) continue;
    Status status = OkStatus();
    try {
      status = run();
    } catch (const std::exception& e) {
      status = Error::Io(e.what());
    }
    if (status) return kExitOk;
    const std::string message = OneLine(status.error().message());
    const int code = ExitCodeOf(status);
    std::optional<std::string> line;
    if (fatal_line) line = fatal_line(*sub, message, code);
    fmt::print(stderr, "{}\n", line ? *line : fmt::format("{}: {}", prefix, message));
    return code;
  }
  return kExitOk;
}

}  // namespace headroom::cli
