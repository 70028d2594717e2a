#include "common/read_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace headroom {

Result<std::string> ReadFileCapped(const std::string& path, size_t max_bytes,
                                   std::string_view what) {
  const std::string name = what.empty() ? path : fmt::format("{} {}", what, path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error::Io(fmt::format("{}: cannot open: {}", name, std::strerror(errno)));
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

}  // namespace headroom
