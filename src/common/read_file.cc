#include "common/read_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace headroom {

namespace {

std::string NameOf(const std::string& path, std::string_view what) {
  return what.empty() ? path : fmt::format("{} {}", what, path);
}

// Reads `fd` whole, at most `max_bytes`; closes it.
Result<std::string> ReadCapped(int fd, const std::string& name, size_t max_bytes) {
  std::string out;
  constexpr size_t kChunkBytes = size_t{64} << 10;
  while (true) {
    const size_t before = out.size();
    const size_t want = std::min(kChunkBytes, max_bytes + 1 - before);
    out.resize(before + want);
    const ssize_t n = ::read(fd, out.data() + before, want);
    if (n < 0 && errno == EINTR) {
      out.resize(before);
      continue;
    }
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      return Error::Io(fmt::format("{}: cannot read: {}", name, std::strerror(error)));
    }
    out.resize(before + static_cast<size_t>(n));
    if (n == 0) break;
    if (out.size() > max_bytes) {
      ::close(fd);
      return Error::Input(fmt::format("{}: larger than {} bytes", name, max_bytes));
    }
  }
  ::close(fd);
  return out;
}

}  // namespace

Result<std::string> ReadFileCapped(const std::string& path, size_t max_bytes,
                                   std::string_view what) {
  const std::string name = NameOf(path, what);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error::Io(fmt::format("{}: cannot open: {}", name, std::strerror(errno)));
  return ReadCapped(fd, name, max_bytes);
}

Result<std::string> ReadRegularFileCapped(const std::string& path, size_t max_bytes,
                                          std::string_view what) {
  const std::string name = NameOf(path, what);
  // O_NONBLOCK: opening a FIFO for reading waits for a writer without it. A regular file's reads
  // ignore the flag.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return Error::Io(fmt::format("{}: cannot open: {}", name, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    return Error::Io(fmt::format("{}: cannot stat: {}", name, std::strerror(error)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error::Input(
        fmt::format("{}: is {}, not a regular file", name, FileTypeName(st.st_mode)));
  }
  return ReadCapped(fd, name, max_bytes);
}

bool ReadableByOthers(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && (st.st_mode & 0077) != 0;
}

const char* FileTypeName(unsigned mode) {
  return S_ISREG(mode)    ? "a regular file"
         : S_ISDIR(mode)  ? "a directory"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISSOCK(mode) ? "a socket"
                          : "of another kind";
}

}  // namespace headroom
