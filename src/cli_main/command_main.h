// The one place a command-line program of headroom maps what happened to an exit status and a
// message (`headroom` and `headroom-diloco`): 0 success, 1 a runtime or input error, 2 a usage
// error; every error one line on stderr.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "cli_main/command.h"
#include "common/error.h"

namespace headroom::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

// A message on one line: newlines and other control bytes (CLI11's own, or inside an argument it
// quotes) become spaces; trailing spaces go.
std::string OneLine(std::string text);

// 0 for success, 2 for a usage error, 1 for any other.
int ExitCodeOf(const Status& status);

// A command's own form of its fatal error, one line without its newline (a daemon asked for
// JSON logs writes it as one of them); nullopt: the plain "PREFIX: MESSAGE".
using FatalLine = std::function<std::optional<std::string>(
    const CLI::App& command, std::string_view message, int exit_status)>;

// Parses argv into `app` and runs the command parsed (its entry in `commands`): --help and
// --version print as CLI11 prints them; a command with commands of its own and none given is
// named with them ("PATH needs a command: a, b (PATH --help)"); every other error is
// "PREFIX: MESSAGE" on one line, or the command's `fatal_line` for an error of a command that
// ran. An exception from a command is a runtime error.
// `path`: the program as typed ("headroom", "headroom diloco"); `prefix`: "headroom: error".
int ParseAndRun(CLI::App& app, int argc, char** argv, const std::string& path,
                const std::string& prefix, const std::map<CLI::App*, Command>& commands,
                const FatalLine& fatal_line = nullptr);

}  // namespace headroom::cli
