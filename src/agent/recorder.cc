#include "agent/recorder.h"

#include "common/paths.h"
#include "trace/meta.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include <sys/stat.h>

namespace headroom::agent {

namespace {

bool Exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

constexpr int kMaxRotations = 100000;

}  // namespace

Result<std::string> RotateTrace(const std::string& path) {
  // Only a regular file is moved away; /dev/null or /dev/stdout is written in place, and a
  // directory, a device or a FIFO is refused, never moved.
  auto kind = CheckOutputPath(path);
  if (!kind) return std::move(kind).error();
  if (*kind == OutputKind::kInPlace) return std::string();
  const bool trace = Exists(path);
  const bool meta = Exists(trace::MetaPathFor(path));
  if (!trace && !meta) return std::string();
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  const bool has_ext =
      dot != std::string::npos && dot > (slash == std::string::npos ? 0 : slash + 1);
  const std::string stem = has_ext ? path.substr(0, dot) : path;
  const std::string ext = has_ext ? path.substr(dot) : std::string();
  for (int n = 1; n <= kMaxRotations; ++n) {
    const std::string target = fmt::format("{}.{}{}", stem, n, ext);
    if (Exists(target) || Exists(trace::MetaPathFor(target))) continue;
    // rename() does not replace a link's target: a link at `path` moves as the link it is.
    if (trace && std::rename(path.c_str(), target.c_str()) != 0) {
      return Error::Io(fmt::format("{}: cannot keep the earlier trace as {}: {}", path, target,
                                   std::strerror(errno)));
    }
    if (meta &&
        std::rename(trace::MetaPathFor(path).c_str(), trace::MetaPathFor(target).c_str()) != 0) {
      return Error::Io(fmt::format("{}: cannot keep the earlier trace's metadata: {}",
                                   trace::MetaPathFor(path), std::strerror(errno)));
    }
    return target;
  }
  return Error::Io(fmt::format("{}: {} earlier traces beside it already", path, kMaxRotations));
}

Result<Recorder> Recorder::Open(const std::string& path,
                                const std::optional<trace::TraceMeta>& meta) {
  auto kind = CheckOutputPath(path);
  if (!kind) return std::move(kind).error();
  // In place (/dev/null, /dev/stdout): no metadata file beside it (not in /dev).
  if (meta && *kind == OutputKind::kFile) {
    const std::string meta_path = trace::MetaPathFor(path);
    std::FILE* m = std::fopen(meta_path.c_str(), "w");
    const std::string text = trace::MetaToJson(*meta);
    const bool ok = m != nullptr && std::fwrite(text.data(), 1, text.size(), m) == text.size();
    if (m != nullptr && std::fclose(m) != 0) m = nullptr;
    if (!ok || m == nullptr) {
      return Error::Io(fmt::format("{}: cannot write the agent trace's metadata: {}", meta_path,
                                   std::strerror(errno)));
    }
  }
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    const int error = errno;
    if (meta && *kind == OutputKind::kFile)
      std::remove(trace::MetaPathFor(path).c_str());  // nothing half-written
    return Error::Io(
        fmt::format("{}: cannot write the agent trace: {}", path, std::strerror(error)));
  }
  std::fputs("t_s,gpu,power_w,phase,step,tokens,concurrency,group_size,budget_w\n", f);
  std::fflush(f);
  return Recorder(f);
}

Recorder::Recorder(Recorder&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)),
      write_errors_(other.write_errors_),
      first_error_(std::move(other.first_error_)),
      last_flush_s_(other.last_flush_s_),
      tokens_written_(other.tokens_written_) {}

Recorder::~Recorder() {
  if (file_ != nullptr) std::fclose(file_);
}

void Recorder::Write(double t_s, const std::vector<double>& power_w, std::string_view phase,
                     int step, double tokens_total, int concurrency, int group_size,
                     double budget_w) {
  const long long total = std::llround(std::clamp(tokens_total, 0.0, 1e15));
  // A total below what was written: the trainer restarted and counts from 0 again.
  const long long tokens = total >= tokens_written_ ? total - tokens_written_ : total;
  tokens_written_ = total;
  for (size_t g = 0; g < power_w.size(); ++g) {
    const std::string row =
        fmt::format("{:.3f},{},{:.2f},{},{},{},{},{},{:.2f}\n", t_s, g, power_w[g], phase, step,
                    g == 0 ? tokens : 0LL, concurrency, group_size, budget_w);
    if (std::fwrite(row.data(), 1, row.size(), file_) != row.size()) {
      Failed(errno);
      return;
    }
  }
}

void Recorder::MaybeFlush(double t_s, bool force) {
  if (force || t_s - last_flush_s_ >= 1.0) {
    if (std::fflush(file_) != 0 || std::ferror(file_) != 0) Failed(errno);
    last_flush_s_ = t_s;
  }
}

void Recorder::Failed(int error) {
  if (write_errors_++ == 0) first_error_ = std::strerror(error != 0 ? error : EIO);
  std::clearerr(file_);
}

}  // namespace headroom::agent
