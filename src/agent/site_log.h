// --site-log: the one writer of the agent's audit lines, one JSON object per line, appended and
// flushed at once (an auditor's input: tests/site/chaos.py's audit). Two kinds of line:
//   every change of what the job acts on:
//     {"t_mono_s", "pid", "job", "state", "job_budget_w", "budget_per_gpu_w", "term", "seq",
//      "lease", "valid_until_mono_s"}
//   the twin's true power over each interval (--source twin only):
//     {"t_mono_s", "pid", "job", "power_w", "phase"}
// Times are the machine's CLOCK_MONOTONIC seconds. A write that fails (a full disk) is said once
// and counted (headroom_trace_write_errors_total); the agent goes on without it.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/log.h"
#include "coord/member.h"

namespace headroom::agent {

class SiteLog {
 public:
  // Opens `path` to append (created when absent). `pid` and `job` go on every line.
  static Result<std::unique_ptr<SiteLog>> Open(const std::string& path, long long pid,
                                               std::string job, Logger log);
  SiteLog(const SiteLog&) = delete;
  SiteLog& operator=(const SiteLog&) = delete;
  ~SiteLog();

  // One thread at a time (the runner's).
  void Budget(double t_mono_s, const coord::Acting& acting, double budget_per_gpu_w);
  void Power(double t_mono_s, double power_w, std::string_view phase);
  // Failed writes so far (any thread).
  uint64_t errors() const { return errors_.load(); }

 private:
  SiteLog(std::FILE* f, std::string path, long long pid, std::string job, Logger log);
  void Line(const std::string& text);

  std::FILE* const f_;
  const std::string path_;
  const long long pid_;
  const std::string job_;
  const Logger log_;
  std::atomic<uint64_t> errors_{0};
};

}  // namespace headroom::agent
