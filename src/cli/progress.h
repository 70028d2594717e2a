// Progress of long reads on a terminal: "reading FILE: 45% (160 MB/s)" on stderr, at most a few
// times a second, only when stderr is a terminal. The clock is read here, in the CLI only.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace headroom::cli {

class Progress {
 public:
  Progress(std::string label, std::optional<uint64_t> total_bytes);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void Update(uint64_t bytes_done);
  // Progress in other units: "LABEL: 45% (DONE / TOTAL UNIT)".
  void UpdateCount(double done, double total, std::string_view unit);

 private:
  std::string label_;
  std::optional<uint64_t> total_bytes_;
  bool enabled_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace headroom::cli
