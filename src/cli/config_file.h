// `--config FILE` for the daemons: a TOML file whose keys are the command's option names.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace headroom::cli {

// Applies FILE's keys to `app`'s options: every key is an option name without the dashes
// (`config` itself is not), and each value goes through the option's own parsing and checks;
// arrays give a repeated option. Call it once the command line is parsed.
//
// Precedence: the command line wins over the file for every option, whichever of its names
// either uses (a renamed option's old name, cli/renamed_options.h, is the same option: `fleet`
// in the file does not override --site-etcd on the command line, nor `site-etcd` --fleet); in
// the file, the new name wins over the old.
//
// Types are strict: a flag takes a boolean and nothing else; an option of numbers (FLOAT, INT,
// UINT) takes TOML numbers only (`budget-w = true` is not 1 W); any other option strings.
//
// FILE is a regular file (common/read_file.h: a FIFO is refused, not waited on). Errors name
// the file, the line and the key: "a.toml:2: key 'controler': not an option of headroom
// <command>", "a.toml:3: key 'budget-w': expected a number, not a boolean" (usage), a TOML
// syntax error "a.toml:3:7: ..." (input).
//
// Returns the renamed options' old names the file holds ("--fleet"), for DeprecationNotes.
Result<std::vector<std::string>> ApplyConfigFile(CLI::App& app, const std::string& path,
                                                 std::string_view command);

}  // namespace headroom::cli
