// `--config FILE` for the daemons: a TOML file whose keys are the command's option names.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <string_view>

#include "common/error.h"

namespace headroom::cli {

// Applies FILE's keys to `app`'s options: every key is an option name without the dashes
// (`config` itself is not), the command line wins over the file, and each value goes through the
// option's own parsing and checks; arrays give a repeated option. Errors name the file, the line
// and the key: "a.toml:2: key 'controler': not an option of headroom <command>" (usage), a
// TOML syntax error "a.toml:3:7: ..." (input). Call it once the command line is parsed.
Status ApplyConfigFile(CLI::App& app, const std::string& path, std::string_view command);

}  // namespace headroom::cli
