// A byte source without views that hands out at most `step` bytes per read: the reader's
// buffered path, with lines straddling every read. Shared by the reader tests and the fuzzer.
#pragma once

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>

#include "trace/reader.h"

namespace headroom::trace {

class TrickleSource final : public ByteSource {
 public:
  TrickleSource(std::string_view data, size_t step) : data_(data), step_(step) {}
  Result<size_t> Read(char* buffer, size_t capacity) override {
    const size_t n = std::min({capacity, step_, data_.size() - offset_});
    std::memcpy(buffer, data_.data() + offset_, n);
    offset_ += n;
    return n;
  }

 private:
  std::string data_;
  size_t step_;
  size_t offset_ = 0;
};

}  // namespace headroom::trace
