#include "common/paths.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/read_file.h"

namespace headroom {
namespace {

constexpr int kMaxSymlinkHops = 40;  // Linux's own limit (MAXSYMLINKS)

// An absolute path with the links of its existing prefix resolved, for comparing paths of
// files that may not exist yet.
std::string Canonical(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = fs::weakly_canonical(path, ec);
  if (ec) p = fs::absolute(path, ec).lexically_normal();
  return p.string();
}

}  // namespace

Result<std::string> ResolveOutputPath(const std::string& path) {
  std::string current = path;
  for (int hop = 0; hop <= kMaxSymlinkHops; ++hop) {
    struct stat st {};
    // Not there (or not reachable): a write creates `current`, or fails and says why.
    if (::lstat(current.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return current;
    std::string target(static_cast<size_t>(st.st_size > 0 ? st.st_size : 255) + 1, '\0');
    while (true) {
      const ssize_t n = ::readlink(current.c_str(), target.data(), target.size());
      if (n < 0) {
        return Error::Io(fmt::format("{}: cannot read the link: {}", path, std::strerror(errno)));
      }
      if (static_cast<size_t>(n) < target.size()) {
        target.resize(static_cast<size_t>(n));
        break;
      }
      target.resize(target.size() * 2);  // the link grew since lstat
    }
    if (!target.empty() && target.front() != '/') {
      const std::filesystem::path dir = std::filesystem::path(current).parent_path();
      if (!dir.empty()) target = (dir / target).string();
    }
    current = std::move(target);
  }
  return Error::Io(fmt::format("{}: too many levels of symbolic links", path));
}

Result<OutputKind> CheckOutputPath(const std::string& path) {
  if (path == "/dev/stdout" || path == "/dev/stderr") return OutputKind::kInPlace;
  auto target = ResolveOutputPath(path);
  if (!target) return std::move(target).error();
  struct stat st {};
  if (::stat(target->c_str(), &st) != 0) return OutputKind::kFile;  // new (or unreachable)
  if (S_ISREG(st.st_mode)) return OutputKind::kFile;
  struct stat null_st {};
  if (S_ISCHR(st.st_mode) && ::stat("/dev/null", &null_st) == 0 && S_ISCHR(null_st.st_mode) &&
      st.st_rdev == null_st.st_rdev) {
    return OutputKind::kInPlace;
  }
  return Error::Io(fmt::format(
      "{}: is {}, not a regular file (outputs go to regular files, new paths, /dev/null or "
      "/dev/stdout)",
      path, FileTypeName(st.st_mode)));
}

Status RefuseOutputOverInput(const std::string& output, std::string_view output_flag,
                             const std::vector<std::pair<std::string, std::string>>& inputs) {
  if (output.empty()) return OkStatus();
  auto resolved = ResolveOutputPath(output);
  if (!resolved) return std::move(resolved).error();
  struct stat out_st {};
  const bool out_exists = ::stat(resolved->c_str(), &out_st) == 0;
  const std::string out_path = Canonical(*resolved);
  for (const auto& [flag, input] : inputs) {
    if (input.empty()) continue;
    bool same = false;
    struct stat in_st {};
    if (out_exists && ::stat(input.c_str(), &in_st) == 0) {
      same = out_st.st_dev == in_st.st_dev && out_st.st_ino == in_st.st_ino;
    } else if (auto in_resolved = ResolveOutputPath(input)) {
      same = Canonical(*in_resolved) == out_path;
    }
    if (same) {
      return Error::Usage(fmt::format("{} '{}' is also {} '{}': refusing to overwrite an input",
                                      output_flag, output, flag, input));
    }
  }
  return OkStatus();
}

}  // namespace headroom
