// A command's TRACE argument opened: a file (long CSV, wide CSV, nvidia-smi log), a saved
// Prometheus range answer (FILE.json), or a range of a live Prometheus server
// (prometheus://HOST:PORT with --query, --start, --end, --step). `analyze` and `fleet` read all
// three the same way (prom/range_query.h: the series, the names, what the numbers are).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "trace/reader.h"

namespace headroom::cli {

struct PrometheusOptions {
  std::vector<std::string> queries;  // one for every prometheus:// TRACE, or one per TRACE
  std::string start;
  std::string end;
  std::string step = "0.5s";
  int64_t max_points = 10000;
  double timeout_s = 60.0;
  std::string token_file;

  void Register(CLI::App& app);
  // The flags make sense for `urls` prometheus:// TRACEs (--query and the range are for them
  // only; --query once or once per such TRACE).
  Status Check(size_t urls) const;
};

struct OpenedTrace {
  std::unique_ptr<trace::ByteSource> source;
  std::string format;           // "" for a file (the reader says); else what it came from
  std::string resolution;       // "" for a file; else what the numbers are (prom/range_query.h)
  bool made_in_memory = false;  // a Prometheus range or answer: a long CSV, not the file's bytes
};

// `index` is the TRACE's place among the prometheus:// TRACEs (which --query it takes).
// `on_chunk` shows progress of a live query.
// `max_gpus`: a Prometheus answer with more series is refused (trace::ReadOptions::max_gpus).
Result<OpenedTrace> OpenTrace(const std::string& arg, size_t index,
                              const PrometheusOptions& prometheus, size_t max_gpus,
                              const std::function<void(size_t, size_t)>& on_chunk = {});

// A TRACE that is a Prometheus answer (a saved FILE.json, or prometheus://).
bool IsPrometheusInput(const std::string& arg);
bool IsPrometheusUrl(const std::string& arg);

}  // namespace headroom::cli
