// Output files that are either complete or absent: nothing half-written.
//
// Data goes to a temporary file beside the target; Commit() flushes it and renames it over the
// target. A writer destroyed without Commit() removes its temporary file.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include "common/error.h"

namespace headroom {

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

  // Flushes, closes and renames onto the target path.
  Status Commit();

 private:
  AtomicFileWriter(std::string path, std::string temp_path, std::FILE* file)
      : path_(std::move(path)), temp_path_(std::move(temp_path)), file_(file) {}

  std::string path_;
  std::string temp_path_;
  std::FILE* file_ = nullptr;
};

// Writes `content` to `path` atomically.
Status WriteFileAtomically(const std::string& path, std::string_view content);

}  // namespace headroom
