#include "common/atomic_file.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pthread.h>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "common/paths.h"

namespace headroom {
namespace {

// ---- The registry of temporary files in progress --------------------------------------------
//
// Fixed storage only, so that a signal handler can read it. A slot goes kFree -> kFilling (its
// path being copied, invisible to the handler) -> kLive, and back to kFree when its writer
// commits or gives up; the handler takes kLive slots to kUnlinking, so a slot it is unlinking is
// never refilled under it.
enum SlotState : int { kFree = 0, kFilling = 1, kLive = 2, kUnlinking = 3 };

struct Slot {
  std::atomic<int> state{kFree};
  char path[kMaxTempPathBytes];
};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs lock-free state");

Slot g_slots[kMaxTempFilesTracked];

int Register(const std::string& path) {
  if (path.size() >= kMaxTempPathBytes) return -1;
  for (size_t i = 0; i < kMaxTempFilesTracked; ++i) {
    int expected = kFree;
    if (!g_slots[i].state.compare_exchange_strong(expected, kFilling)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(kLive, std::memory_order_release);
    return static_cast<int>(i);
  }
  return -1;
}

void Unregister(int slot) {
  if (slot >= 0) g_slots[slot].state.store(kFree, std::memory_order_release);
}

extern "C" void RemoveTempFilesAndReraise(int signal) {
  const int saved_errno = errno;
  for (Slot& slot : g_slots) {
    int live = kLive;
    if (slot.state.compare_exchange_strong(live, kUnlinking)) ::unlink(slot.path);
  }
  errno = saved_errno;
  // SA_RESETHAND has restored the default action; the signal, blocked while this handler runs,
  // is delivered with it when the handler returns.
  ::raise(signal);
}

}  // namespace

void RemoveTempFilesOnSignals() {
  for (const int signal : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction current {};
    if (::sigaction(signal, nullptr, &current) != 0) continue;
    const bool is_default = (current.sa_flags & SA_SIGINFO) == 0 && current.sa_handler == SIG_DFL;
    if (!is_default) continue;  // ignored (nohup, a background job) or someone else's handler
    struct sigaction action {};
    action.sa_handler = RemoveTempFilesAndReraise;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;
    ::sigaction(signal, &action, nullptr);
  }
}

Result<AtomicFileWriter> AtomicFileWriter::Open(const std::string& path) {
  auto kind = CheckOutputPath(path);
  if (!kind) return std::move(kind).error();
  if (*kind == OutputKind::kInPlace) {
    std::FILE* file = std::fopen(path.c_str(), "w");
    if (file == nullptr) {
      return Error::Io(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
    }
    return AtomicFileWriter(path, path, std::string(), file, -1);
  }
  auto target = ResolveOutputPath(path);
  if (!target) return std::move(target).error();
  std::string temp_path = *target + ".tmp.XXXXXX";
  std::vector<char> name(temp_path.begin(), temp_path.end());
  name.push_back('\0');
  // The file must not exist unregistered: a signal between mkstemp and Register would leave it
  // behind. Held back across the two, a signal is delivered once the path is in the registry.
  sigset_t signals;
  sigset_t previous;
  sigemptyset(&signals);
  for (const int signal : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&signals, signal);
  pthread_sigmask(SIG_BLOCK, &signals, &previous);
  const int fd = mkstemp(name.data());
  const int created_errno = errno;
  const int slot = fd >= 0 ? Register(name.data()) : -1;
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (fd < 0) {
    return Error::Io(fmt::format("{}: cannot create: {}", path, std::strerror(created_errno)));
  }
  // mkstemp creates 0600; give the result the permissions of the file it replaces, or those a
  // plain open() would.
  struct stat existing {};
  if (::stat(target->c_str(), &existing) == 0 && S_ISREG(existing.st_mode)) {
    fchmod(fd, existing.st_mode & 07777);
  } else {
    const mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, static_cast<mode_t>(0666) & ~mask);
  }
  std::FILE* file = fdopen(fd, "w");
  if (file == nullptr) {
    const int saved = errno;
    close(fd);
    std::remove(name.data());
    Unregister(slot);
    return Error::Io(fmt::format("{}: cannot open: {}", path, std::strerror(saved)));
  }
  constexpr size_t kBufferBytes = 1 << 20;
  std::setvbuf(file, nullptr, _IOFBF, kBufferBytes);
  return AtomicFileWriter(path, std::move(target).value(), std::string(name.data()), file, slot);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      target_path_(std::move(other.target_path_)),
      temp_path_(std::move(other.temp_path_)),
      file_(std::exchange(other.file_, nullptr)),
      slot_(std::exchange(other.slot_, -1)) {}

AtomicFileWriter::~AtomicFileWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);
    if (!temp_path_.empty()) std::remove(temp_path_.c_str());
  }
  Unregister(slot_);
}

void AtomicFileWriter::Write(std::string_view data) {
  std::fwrite(data.data(), 1, data.size(), file_);
}

Status AtomicFileWriter::Commit() {
  std::FILE* file = std::exchange(file_, nullptr);
  const bool write_failed = std::ferror(file) != 0;
  const bool close_failed = std::fclose(file) != 0;
  Status status = OkStatus();
  if (write_failed || close_failed) {
    const int saved = errno;
    if (!temp_path_.empty()) std::remove(temp_path_.c_str());
    status = Error::Io(fmt::format("{}: write failed: {}", path_, std::strerror(saved)));
  } else if (!temp_path_.empty() && std::rename(temp_path_.c_str(), target_path_.c_str()) != 0) {
    const int saved = errno;
    std::remove(temp_path_.c_str());
    status = Error::Io(fmt::format("{}: cannot write: {}", path_, std::strerror(saved)));
  }
  Unregister(std::exchange(slot_, -1));
  return status;
}

Status WriteFileAtomically(const std::string& path, std::string_view content) {
  auto writer = AtomicFileWriter::Open(path);
  if (!writer) return std::move(writer).error();
  writer->Write(content);
  return writer->Commit();
}

}  // namespace headroom
