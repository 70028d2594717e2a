// Options shared by the commands that read traces.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "common/error.h"
#include "trace/reader.h"

namespace headroom::cli {

struct TraceOptions {
  std::string format = "auto";
  int gpus = 0;
  std::optional<double> nameplate_w;

  void Register(CLI::App& app);
  Result<trace::ReadOptions> ToReadOptions() const;
};

// Prints warnings to stderr, one line each.
void PrintWarnings(const std::vector<std::string>& warnings);

}  // namespace headroom::cli
