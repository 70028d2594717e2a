#include "agent/site_log.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>

namespace headroom::agent {

Result<std::unique_ptr<SiteLog>> SiteLog::Open(const std::string& path, long long pid,
                                               std::string job, Logger log) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    return Error::Io(fmt::format("--site-log {}: cannot open: {}", path, std::strerror(errno)));
  }
  return std::unique_ptr<SiteLog>(new SiteLog(f, path, pid, std::move(job), std::move(log)));
}

SiteLog::SiteLog(std::FILE* f, std::string path, long long pid, std::string job, Logger log)
    : f_(f), path_(std::move(path)), pid_(pid), job_(std::move(job)), log_(std::move(log)) {}

SiteLog::~SiteLog() { std::fclose(f_); }

void SiteLog::Budget(double t_mono_s, const coord::Acting& a, double budget_per_gpu_w) {
  Line(
      fmt::format("{{\"t_mono_s\":{:.6f},\"pid\":{},\"job\":\"{}\",\"state\":\"{}\","
                  "\"job_budget_w\":{:.6f},\"budget_per_gpu_w\":{:.6f},\"term\":{},"
                  "\"seq\":{},\"lease\":{},\"valid_until_mono_s\":{}}}\n",
                  t_mono_s, pid_, job_, coord::StateName(a.state), a.job_budget_w, budget_per_gpu_w,
                  a.term, a.seq, a.lease,
                  std::isfinite(a.valid_until_s) ? fmt::format("{:.6f}", a.valid_until_s)
                                                 : std::string("null")));
}

void SiteLog::Power(double t_mono_s, double power_w, std::string_view phase) {
  Line(fmt::format(
      "{{\"t_mono_s\":{:.6f},\"pid\":{},\"job\":\"{}\",\"power_w\":{:.3f},\"phase\":\"{}\"}}\n",
      t_mono_s, pid_, job_, power_w, phase));
}

void SiteLog::Line(const std::string& text) {
  if (std::fwrite(text.data(), 1, text.size(), f_) == text.size() && std::fflush(f_) == 0) {
    return;
  }
  const int error = errno != 0 ? errno : EIO;
  std::clearerr(f_);
  if (errors_.fetch_add(1) == 0) {
    log_.Error(
        fmt::format("--site-log {}: cannot write: {} (the agent goes on; "
                    "headroom_trace_write_errors_total counts the failed writes)",
                    path_, std::strerror(error)));
  }
}

}  // namespace headroom::agent
