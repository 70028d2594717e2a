#include "agent/recorder.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

namespace headroom::agent {

Result<Recorder> Recorder::Open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return Error::Io(
        fmt::format("{}: cannot write the agent trace: {}", path, std::strerror(errno)));
  }
  std::fputs("t_s,gpu,power_w,phase,step,tokens,concurrency,group_size\n", f);
  std::fflush(f);
  return Recorder(f);
}

Recorder::Recorder(Recorder&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)), last_flush_s_(other.last_flush_s_) {}

Recorder::~Recorder() {
  if (file_ != nullptr) std::fclose(file_);
}

void Recorder::Write(double t_s, const std::vector<double>& power_w, std::string_view phase,
                     int step, double tokens, int concurrency, int group_size) {
  for (size_t g = 0; g < power_w.size(); ++g) {
    fmt::print(file_, "{:.3f},{},{:.2f},{},{},{:.0f},{},{}\n", t_s, g, power_w[g], phase, step,
               g == 0 ? tokens : 0.0, concurrency, group_size);
  }
}

void Recorder::MaybeFlush(double t_s, bool force) {
  if (force || t_s - last_flush_s_ >= 1.0) {
    std::fflush(file_);
    last_flush_s_ = t_s;
  }
}

}  // namespace headroom::agent
