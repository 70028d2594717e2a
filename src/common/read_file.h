// Whole-file reads with a bound: the one way headroom reads a file whole (tokens, keys,
// signals, schedules, measured CSVs). It reads in chunks and stops one byte past the bound, so a
// device (/dev/zero), a FIFO or a sparse file of gigabytes costs at most the bound -- a size
// check by seeking (tellg) sees -1 on a device and reads until memory runs out.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/error.h"

namespace headroom {

// The file's bytes, at most `max_bytes`. `what` names the option for messages ("--token-file").
// An Io error "WHAT PATH: cannot open: REASON" (a missing file) or "...: cannot read: REASON" (a
// directory), an Input error
// "WHAT PATH: larger than N bytes".
Result<std::string> ReadFileCapped(const std::string& path, size_t max_bytes,
                                   std::string_view what = {});

inline constexpr size_t kMaxSmallFileBytes = size_t{64} << 10;  // tokens, keys, passwords
inline constexpr size_t kMaxDataFileBytes = size_t{64} << 20;   // signals, schedules, CSVs

}  // namespace headroom
