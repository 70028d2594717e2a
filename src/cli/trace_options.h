// Options shared by the commands that read traces.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <optional>
#include <string>

#include "common/error.h"
#include "trace/reader.h"

namespace headroom::cli {

struct TraceOptions {
  std::string format = "auto";
  int gpus = 0;
  int64_t max_gpus = static_cast<int64_t>(trace::kDefaultMaxGpus);
  std::optional<double> nameplate_w;

  void Register(CLI::App& app);
  Result<trace::ReadOptions> ToReadOptions() const;
};

// Prints warnings to stderr, one line each.
void PrintWarnings(const std::vector<std::string>& warnings);

// How a command's result goes out: the HTML report (when `report_path` is set) is written first,
// atomically; then stdout gets the JSON object or the text tables. The renderers are only
// called for what is asked.
struct Renderers {
  std::function<std::string()> html;
  std::function<std::string()> json;
  std::function<std::string()> text;
};
Status EmitResult(const std::string& report_path, bool json, const Renderers& render);

}  // namespace headroom::cli
