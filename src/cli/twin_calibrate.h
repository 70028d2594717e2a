// `headroom twin calibrate`'s options and run (twin_calibrate.cc); `headroom twin` registers it.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace headroom::cli {

Command SetupTwinCalibrate(CLI::App& app);

}  // namespace headroom::cli
