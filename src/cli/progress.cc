#include "cli/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace headroom::cli {
namespace {

constexpr auto kRefresh = std::chrono::milliseconds(200);
constexpr uint64_t kMinBytesToShow = 32ull << 20;
constexpr double kBytesPerMb = 1e6;

}  // namespace

Progress::Progress(std::string label, std::optional<uint64_t> total_bytes)
    : label_(std::move(label)),
      total_bytes_(total_bytes),
      enabled_(isatty(STDERR_FILENO) == 1 && (!total_bytes || *total_bytes >= kMinBytesToShow)),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

Progress::~Progress() {
  if (shown_) fmt::print(stderr, "\r\033[K");
}

void Progress::UpdateCount(double done, double total, std::string_view unit) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < kRefresh) return;
  last_ = now;
  shown_ = true;
  fmt::print(stderr, "\r\033[K{}: {:.0f}% ({:.0f} / {:.0f} {})", label_,
             total > 0.0 ? 100.0 * done / total : 0.0, done, total, unit);
  std::fflush(stderr);
}

void Progress::Update(uint64_t bytes_done) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < kRefresh) return;
  last_ = now;
  shown_ = true;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const double mb_per_s =
      seconds > 0.0 ? static_cast<double>(bytes_done) / kBytesPerMb / seconds : 0.0;
  if (total_bytes_ && *total_bytes_ > 0) {
    fmt::print(stderr, "\r\033[K{}: {:.0f}% ({:.0f} MB/s)", label_,
               100.0 * static_cast<double>(bytes_done) / static_cast<double>(*total_bytes_),
               mb_per_s);
  } else {
    fmt::print(stderr, "\r\033[K{}: {:.0f} MB ({:.0f} MB/s)", label_,
               static_cast<double>(bytes_done) / kBytesPerMb, mb_per_s);
  }
  std::fflush(stderr);
}

}  // namespace headroom::cli
