// Output files that are either complete or absent: nothing half-written.
//
// Data goes to a temporary file beside the target; Commit() flushes it and renames it over the
// target. The target is the file a write to the path lands on (common/paths.h): through a
// symlink, the link's target gets the content and the link stays a link. An existing target's
// permission bits are kept. A writer destroyed without Commit() removes its temporary file.
// What is not a regular file is refused, except /dev/null and /dev/stdout (or /dev/stderr),
// which are written in place (common/paths.h, CheckOutputPath): nothing to rename, and Commit()
// fails when the write did.
//
// Temporary files in progress are also kept in a fixed-size registry, so that a command killed
// by SIGINT, SIGTERM or SIGHUP leaves none behind -- once it has called
// RemoveTempFilesOnSignals(). The registry never installs a signal handler by itself.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include "common/error.h"

namespace headroom {

// Not thread-safe: one writer per thread (writers on different threads are fine).
class AtomicFileWriter {
 public:
  // Creates the temporary file. Fails with an Io error naming `path`.
  static Result<AtomicFileWriter> Open(const std::string& path);

  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&&) = delete;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  // Buffered; errors surface at Commit().
  void Write(std::string_view data);
  std::FILE* stream() { return file_; }
  // The temporary file being written (for tests and messages).
  const std::string& temp_path() const { return temp_path_; }

  // Flushes, closes and renames onto the target.
  Status Commit();

 private:
  AtomicFileWriter(std::string path, std::string target_path, std::string temp_path,
                   std::FILE* file, int slot)
      : path_(std::move(path)),
        target_path_(std::move(target_path)),
        temp_path_(std::move(temp_path)),
        file_(file),
        slot_(slot) {}

  std::string path_;         // as given, for messages
  std::string target_path_;  // where the rename lands: `path_` with its links followed
  std::string temp_path_;    // empty: written in place
  std::FILE* file_ = nullptr;
  int slot_ = -1;  // in the signal registry; -1: not registered
};

// Writes `content` to `path` atomically.
Status WriteFileAtomically(const std::string& path, std::string_view content);

// Installs handlers for SIGINT, SIGTERM and SIGHUP that unlink every registered temporary file
// (async-signal-safe: fixed storage, unlink only), then re-raise the signal with its default
// action, so the exit status still says "killed by signal". A signal that is ignored or already
// has a handler at the call is left alone. For commands that write files; idempotent. Up to
// kMaxTempFilesTracked temporary paths of up to kMaxTempPathBytes bytes are tracked at once;
// more, or longer ones, are still removed by their writers, just not on a signal.
void RemoveTempFilesOnSignals();
inline constexpr size_t kMaxTempFilesTracked = 64;
inline constexpr size_t kMaxTempPathBytes = 4096;

}  // namespace headroom
