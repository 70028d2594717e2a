#include "common/atomic_file.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

namespace headroom {

Result<AtomicFileWriter> AtomicFileWriter::Open(const std::string& path) {
  std::string temp_path = path + ".tmp.XXXXXX";
  std::vector<char> name(temp_path.begin(), temp_path.end());
  name.push_back('\0');
  const int fd = mkstemp(name.data());
  if (fd < 0) {
    return Error::Io(fmt::format("{}: cannot create: {}", path, std::strerror(errno)));
  }
  // mkstemp creates 0600; give the result the permissions a plain open() would.
  const mode_t mask = umask(0);
  umask(mask);
  fchmod(fd, static_cast<mode_t>(0666) & ~mask);
  std::FILE* file = fdopen(fd, "w");
  if (file == nullptr) {
    close(fd);
    std::remove(name.data());
    return Error::Io(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  }
  constexpr size_t kBufferBytes = 1 << 20;
  std::setvbuf(file, nullptr, _IOFBF, kBufferBytes);
  return AtomicFileWriter(path, std::string(name.data()), file);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      temp_path_(std::move(other.temp_path_)),
      file_(std::exchange(other.file_, nullptr)) {}

AtomicFileWriter::~AtomicFileWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::remove(temp_path_.c_str());
  }
}

void AtomicFileWriter::Write(std::string_view data) {
  std::fwrite(data.data(), 1, data.size(), file_);
}

Status AtomicFileWriter::Commit() {
  std::FILE* file = std::exchange(file_, nullptr);
  const bool write_failed = std::ferror(file) != 0;
  const bool close_failed = std::fclose(file) != 0;
  if (write_failed || close_failed) {
    const int saved = errno;
    std::remove(temp_path_.c_str());
    return Error::Io(fmt::format("{}: write failed: {}", path_, std::strerror(saved)));
  }
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int saved = errno;
    std::remove(temp_path_.c_str());
    return Error::Io(fmt::format("{}: cannot write: {}", path_, std::strerror(saved)));
  }
  return OkStatus();
}

Status WriteFileAtomically(const std::string& path, std::string_view content) {
  auto writer = AtomicFileWriter::Open(path);
  if (!writer) return std::move(writer).error();
  writer->Write(content);
  return writer->Commit();
}

}  // namespace headroom
