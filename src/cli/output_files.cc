#include "cli/output_files.h"

#include <fmt/format.h>
#include <sys/statvfs.h>

#include <cmath>
#include <filesystem>

#include "common/paths.h"
#include "twin/scenario.h"

namespace headroom::cli {

std::vector<std::pair<std::string, std::string>> TraceInputs(const std::string& flag,
                                                             const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, std::string>> inputs = {{flag, path}};
  std::vector<std::string> sidecars = {path + ".meta.json"};
  const fs::path p(path);
  if (p.has_extension()) sidecars.push_back(fs::path(p).replace_extension(".meta.json").string());
  for (const auto& sidecar : sidecars) {
    std::error_code ec;
    if (fs::exists(sidecar, ec)) inputs.emplace_back(fmt::format("{}'s sidecar", flag), sidecar);
  }
  return inputs;
}

std::vector<std::pair<std::string, std::string>> ScenarioInputs(const std::string& flag,
                                                                const std::string& names) {
  std::vector<std::pair<std::string, std::string>> inputs;
  size_t begin = 0;
  while (begin <= names.size()) {
    const size_t comma = std::min(names.find(',', begin), names.size());
    std::string name = names.substr(begin, comma - begin);
    while (!name.empty() && name.front() == ' ') name.erase(0, 1);
    while (!name.empty() && name.back() == ' ') name.pop_back();
    if (!name.empty() && !twin::BuiltinScenarioText(name)) inputs.emplace_back(flag, name);
    begin = comma + 1;
  }
  return inputs;
}

std::string FormatBytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
  size_t unit = 0;
  while (bytes >= 1000.0 && unit + 1 < std::size(kUnits)) {
    bytes /= 1000.0;
    ++unit;
  }
  if (unit == 0) return fmt::format("{:.0f} B", bytes);
  return bytes < 10.0 ? fmt::format("{:.1f} {}", bytes, kUnits[unit])
                      : fmt::format("{:.0f} {}", bytes, kUnits[unit]);
}

Status CheckOutputSpace(std::string_view label, const std::string& path, double bytes) {
  auto target = ResolveOutputPath(path);
  if (!target) return std::move(target).error();
  std::filesystem::path dir = std::filesystem::path(*target).parent_path();
  if (dir.empty()) dir = std::filesystem::current_path();
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) == 0) {
    const double free_bytes = static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize);
    if (bytes > free_bytes) {
      return Error::Io(fmt::format("{}: about {} to write to {}, but its file system has {} free",
                                   label, FormatBytes(bytes), path, FormatBytes(free_bytes)));
    }
  }
  if (bytes >= kAnnounceBytes) {
    fmt::print(stderr, "{}: about {} to write to {}\n", label, FormatBytes(bytes), path);
  }
  return OkStatus();
}

}  // namespace headroom::cli
