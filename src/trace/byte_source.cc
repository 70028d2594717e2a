// Byte sources: memory, and files mapped a window at a time (trace/reader.h).
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "trace/reader.h"

namespace headroom::trace {

// Byte sources

Result<size_t> MemorySource::Read(char* buffer, size_t capacity) {
  const size_t n = std::min(capacity, data_.size() - offset_);
  std::memcpy(buffer, data_.data() + offset_, n);
  offset_ += n;
  return n;
}

Result<std::optional<std::string_view>> MemorySource::View(uint64_t offset, size_t want) {
  if (offset >= data_.size()) return std::optional<std::string_view>(std::string_view());
  return std::optional<std::string_view>(data_.substr(offset, want));
}

namespace {

// SIGBUS guard for mapped windows: a file that shrinks under its mapping makes reads of the
// lost pages raise SIGBUS. The handler maps zeros over the faulting page of this thread's
// window, so the parse ends normally, and records the fault; FileSource::View then reports the
// file as changed. A fault anywhere else goes to the disposition from before.
[[gnu::tls_model("initial-exec")]] thread_local const char* g_window_begin = nullptr;
[[gnu::tls_model("initial-exec")]] thread_local const char* g_window_end = nullptr;
[[gnu::tls_model("initial-exec")]] thread_local volatile sig_atomic_t g_window_faulted = 0;
struct sigaction g_previous_sigbus {};
size_t g_page_bytes = 4096;

void OnSigbus(int signal, siginfo_t* info, void* context) {
  char* const address = static_cast<char*>(info->si_addr);
  if (address >= g_window_begin && address < g_window_end) {
    const auto page = reinterpret_cast<uintptr_t>(address) & ~(uintptr_t{g_page_bytes} - 1);
    void* const zeros = ::mmap(reinterpret_cast<void*>(page), g_page_bytes, PROT_READ,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (zeros != MAP_FAILED) {
      g_window_faulted = 1;
      return;
    }
  }
  if (g_previous_sigbus.sa_flags & SA_SIGINFO) {
    if (g_previous_sigbus.sa_sigaction != nullptr) {
      g_previous_sigbus.sa_sigaction(signal, info, context);
      return;
    }
  } else if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN) {
    g_previous_sigbus.sa_handler(signal);
    return;
  }
  // Default action: returning re-runs the faulting access, which now kills the process.
  ::signal(SIGBUS, SIG_DFL);
}

void InstallSigbusGuard() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_page_bytes = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    struct sigaction action {};
    action.sa_sigaction = OnSigbus;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &g_previous_sigbus);
  });
}

}  // namespace

void FileSource::Unmap() {
  if (map_ == nullptr) return;
  g_window_begin = g_window_end = nullptr;
  ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

Result<std::optional<std::string_view>> FileSource::View(uint64_t offset, size_t want) {
  Unmap();
  if (g_window_faulted) {
    g_window_faulted = 0;
    return Error::Io(fmt::format("{}: the file shrank while being read", path_));
  }
  if (!mappable_ || !size_bytes_ || *size_bytes_ == 0) return std::optional<std::string_view>();
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    return Error::Io(fmt::format("{}: cannot stat: {}", path_, std::strerror(errno)));
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < offset) return Error::Io(fmt::format("{}: the file shrank while being read", path_));
  if (offset == size) return std::optional<std::string_view>(std::string_view());
  InstallSigbusGuard();
  const uint64_t map_offset = offset / g_page_bytes * g_page_bytes;
  const size_t lead = static_cast<size_t>(offset - map_offset);
  const size_t bytes = static_cast<size_t>(std::min<uint64_t>(size - map_offset, lead + want));
  void* const map =
      ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd_, static_cast<off_t>(map_offset));
  if (map == MAP_FAILED) {
    if (offset == 0) {  // a file system without mmap: read() instead
      mappable_ = false;
      return std::optional<std::string_view>();
    }
    return Error::Io(fmt::format("{}: cannot map: {}", path_, std::strerror(errno)));
  }
  map_ = map;
  map_bytes_ = bytes;
  g_window_begin = static_cast<const char*>(map);
  g_window_end = g_window_begin + bytes;
  return std::optional<std::string_view>(std::string_view(g_window_begin + lead, bytes - lead));
}

Result<std::unique_ptr<FileSource>> FileSource::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error::Io(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  std::optional<uint64_t> size;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) size = static_cast<uint64_t>(st.st_size);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return std::unique_ptr<FileSource>(new FileSource(path, fd, size));
}

FileSource::~FileSource() {
  Unmap();
  ::close(fd_);
}

Result<size_t> FileSource::Read(char* buffer, size_t capacity) {
  while (true) {
    const ssize_t n = ::read(fd_, buffer, capacity);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EINTR) continue;
    return Error::Io(fmt::format("{}: cannot read: {}", path_, std::strerror(errno)));
  }
}

}  // namespace headroom::trace
