// The agent's own trace, in headroom's long format (docs/TRACE_FORMAT.md): one row per GPU per
// control interval — t_s, gpu, power_w, phase, step, tokens, concurrency, group_size, budget_w (per
// GPU, in force) — appended and flushed to the file every second, so a crash loses at most the last
// second. `headroom analyze` reads it as is. Not thread-safe (the runner owns it).
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "trace/schema.h"

namespace headroom::agent {

// A trace already at `path` is never erased: it and its sidecar are renamed to the first free
// `<stem>.<N><ext>` (agent.csv -> agent.1.csv, agent.1.csv.meta.json; N = 1, 2, ...), so the
// highest N is the run before this one. Returns the name it was given; empty when there was
// nothing at `path`.
Result<std::string> RotateTrace(const std::string& path);

class Recorder {
 public:
  // Creates the trace (header only) and, when given, its `<trace>.meta.json` sidecar. A file
  // already there is overwritten: call RotateTrace first, once the run has all it needs.
  static Result<Recorder> Open(const std::string& path,
                               const std::optional<trace::TraceMeta>& meta = std::nullopt);
  Recorder(Recorder&& other) noexcept;
  Recorder& operator=(Recorder&&) = delete;
  ~Recorder();

  // tokens_total: the job's tokens so far. Each row's `tokens` column (on GPU 0's row) is the
  // whole-token increase since the previous row, so the column sums to round(tokens_total)
  // without drift. A total that falls (a restarted trainer counting from 0) starts a new count.
  void Write(double t_s, const std::vector<double>& power_w, std::string_view phase, int step,
             double tokens_total, int concurrency, int group_size, double budget_w);
  // Flushes when a second has passed since the last flush (by t_s), or when forced.
  void MaybeFlush(double t_s, bool force = false);
  // Writes and flushes that failed (a full disk, a file over its size limit), and why the
  // first did: the runner says so once and counts them; the rows go on being tried.
  uint64_t write_errors() const { return write_errors_; }
  const std::string& first_error() const { return first_error_; }

 private:
  explicit Recorder(std::FILE* f) : file_(f) {}
  void Failed(int error);
  std::FILE* file_ = nullptr;
  uint64_t write_errors_ = 0;
  std::string first_error_;
  double last_flush_s_ = 0.0;
  long long tokens_written_ = 0;
};

}  // namespace headroom::agent
