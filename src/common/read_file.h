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

// ReadFileCapped for what must be a regular file: a secret (--token-file, --etcd-password-file)
// or a --config. Anything else -- a FIFO, a device, a directory, a socket -- is an Input error
// "WHAT PATH: is a FIFO, not a regular file" before a byte is read: opened without blocking and
// checked on the descriptor, so a FIFO with no writer neither hangs the start nor keeps a
// daemon from its SIGTERM, and a regular file's read cannot block on another process.
Result<std::string> ReadRegularFileCapped(const std::string& path, size_t max_bytes,
                                          std::string_view what = {});

// Whether users other than the owner may read `path` (its group or others: mode & 077); false
// when it cannot be stat'ed. A secret that they may read gets a warning (chmod 600 it).
bool ReadableByOthers(const std::string& path);

// "a directory", "a character device", "a block device", "a FIFO", "a socket", "a regular
// file", "of another kind": a stat mode's file type, as the messages say it.
const char* FileTypeName(unsigned mode);

inline constexpr size_t kMaxSmallFileBytes = size_t{64} << 10;  // tokens, keys, passwords
inline constexpr size_t kMaxDataFileBytes = size_t{64} << 20;   // signals, schedules, CSVs

}  // namespace headroom
