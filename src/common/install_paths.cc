#include "common/install_paths.h"

#include <filesystem>
#include <system_error>

namespace headroom {

std::string ResolveDataDir(std::string_view exe, std::string_view source_dir, std::string_view what,
                           const std::function<bool(const std::string&)>& is_dir) {
  const std::filesystem::path bin = std::filesystem::path(exe).parent_path();
  if (!bin.empty()) {
    const std::string installed =
        (bin.parent_path() / "share" / "headroom" / std::filesystem::path(what)).string();
    if (is_dir(installed)) return installed;
  }
  if (!source_dir.empty()) {
    const std::string source = (std::filesystem::path(source_dir) / what).string();
    if (is_dir(source)) return source;
  }
  return "";
}

std::string SharedDataDir(std::string_view what) {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ResolveDataDir(ec ? std::string() : exe.string(), HEADROOM_SOURCE_DIR, what,
                        [](const std::string& p) {
                          std::error_code e;
                          return std::filesystem::is_directory(p, e);
                        });
}

}  // namespace headroom
