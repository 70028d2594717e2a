#include "diloco_core/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "diloco_core/digest.h"

namespace headroom::diloco {

namespace {
constexpr std::string_view kCheckpointMagic = "headroom-diloco-checkpoint 1\n";
// The header line is short (five fields); a longer one is not a checkpoint's.
constexpr std::size_t kMaxHeaderBytes = 4096;

// Closes a file descriptor when it goes.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads exactly `n` bytes at `offset` into `out`; false at an early end or an error.
bool ReadAt(int fd, char* out, std::size_t n, off_t offset) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, out, n, offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    out += got;
    n -= static_cast<std::size_t>(got);
    offset += got;
  }
  return true;
}

}  // namespace

Status WriteCheckpoint(const std::string& path, const Checkpoint& c) {
  nlohmann::json head = {{"model", c.model},
                         {"parameters", c.parameters.size()},
                         {"sha256", Hex(Sha256Floats(c.parameters))},
                         {"round", c.round},
                         {"tokens", c.tokens}};
  std::string out(kCheckpointMagic);
  out += head.dump();
  out += '\n';
  const std::size_t at = out.size();
  out.resize(at + 4 * c.parameters.size());
  std::memcpy(out.data() + at, c.parameters.data(), 4 * c.parameters.size());
  return WriteFileAtomically(path, out);
}

Result<Checkpoint> ReadCheckpoint(const std::string& path) {
  const auto bad = [&](int line, std::string_view why) {
    return Error::Input(line > 0 ? fmt::format("{}:{}: {}", path, line, why)
                                 : fmt::format("{}: {}", path, why));
  };
  Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (file.fd < 0) {
    return Error::Input(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(file.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    // A directory, a device (/dev/zero), a FIFO: nothing a checkpoint is written as.
    return bad(0, "not a regular file (a checkpoint is one, written by `headroom diloco`)");
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  // The magic line and the header, read whole before any parameter.
  std::string head_text(std::min<std::uint64_t>(size, kCheckpointMagic.size() + kMaxHeaderBytes),
                        '\0');
  if (!ReadAt(file.fd, head_text.data(), head_text.size(), 0)) {
    return Error::Io(fmt::format("{}: cannot read", path));
  }
  if (!std::string_view(head_text).starts_with(kCheckpointMagic)) {
    return bad(1, "not a headroom-diloco checkpoint");
  }
  const auto eol = head_text.find('\n', kCheckpointMagic.size());
  if (eol == std::string::npos) return bad(2, "no header line (or one over 4 KiB)");
  const auto head = nlohmann::json::parse(
      head_text.substr(kCheckpointMagic.size(), eol - kCheckpointMagic.size()), nullptr, false);
  if (head.is_discarded() || !head.is_object()) return bad(2, "header is not JSON");
  for (const char* field : {"model", "parameters", "sha256", "round", "tokens"}) {
    if (!head.contains(field)) return bad(2, fmt::format("field '{}': missing", field));
  }
  if (!head["model"].is_string()) return bad(2, "field 'model': expected a string");
  if (!head["sha256"].is_string()) return bad(2, "field 'sha256': expected a string");
  const auto& parameters = head["parameters"];
  if (!parameters.is_number_unsigned() ||
      parameters.get<std::uint64_t>() > kMaxCheckpointParameters) {
    return bad(2, fmt::format("field 'parameters': expected a count from 0 to {}",
                              kMaxCheckpointParameters));
  }
  const auto& round = head["round"];
  if (!round.is_number_integer() || round.get<std::int64_t>() < 0 ||
      round.get<std::int64_t>() > INT_MAX) {
    return bad(2, fmt::format("field 'round': expected a whole number from 0 to {}", INT_MAX));
  }
  if (!head["tokens"].is_number_unsigned()) {
    return bad(2, "field 'tokens': expected a whole number, 0 or more");
  }
  Checkpoint c;
  c.model = head["model"].get<std::string>();
  c.round = static_cast<int>(round.get<std::int64_t>());
  c.tokens = head["tokens"].get<std::uint64_t>();
  const std::uint64_t n = parameters.get<std::uint64_t>();  // <= 2^30: 4 n cannot wrap
  const std::uint64_t body = size - (eol + 1);
  if (body != 4 * n) {
    return bad(0, fmt::format("{} bytes of parameters, expected {}", body, 4 * n));
  }
  c.parameters.resize(n);
  if (!ReadAt(file.fd, reinterpret_cast<char*>(c.parameters.data()), body,
              static_cast<off_t>(eol + 1))) {
    return Error::Io(fmt::format("{}: cannot read its parameters", path));
  }
  if (Hex(Sha256Floats(c.parameters)) != head["sha256"].get<std::string>()) {
    return bad(2, "field 'sha256': the parameters do not hash to it");
  }
  for (std::size_t i = 0; i < c.parameters.size(); ++i) {
    if (!std::isfinite(c.parameters[i])) {
      return bad(0, fmt::format("parameter {} is {}: not a usable model", i, c.parameters[i]));
    }
  }
  return c;
}

}  // namespace headroom::diloco
