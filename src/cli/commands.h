// The `headroom` subcommands. Each Setup* registers its options on the app and returns the
// function that runs it; the CLI stays thin: parse, call the libraries, print.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "cli/numbers.h"
#include "cli_main/command.h"
#include "common/error.h"

namespace headroom::cli {

Command SetupAnalyze(CLI::App& app);
Command SetupFleet(CLI::App& app);
Command SetupSynth(CLI::App& app);
Command SetupTwin(CLI::App& app);
Command SetupTrain(CLI::App& app);
Command SetupEval(CLI::App& app);
Command SetupAgent(CLI::App& app);
Command SetupFleetSim(CLI::App& app);
Command SetupSitesSim(CLI::App& app);
Command SetupCoordinator(CLI::App& app);
Command SetupPilot(CLI::App& app);
Command SetupPolicy(CLI::App& app);

}  // namespace headroom::cli
