#include "agent/guard_state.h"

#include <sys/stat.h>

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/atomic_file.h"
#include "common/read_file.h"

namespace headroom::agent {

namespace {
using nlohmann::json;
constexpr int kMaxNvmlIndex = 1023;
constexpr double kMaxLimitW = 10000.0;
}  // namespace

std::string GuardStateToJson(const GuardState& state) {
  json j;
  j["format"] = kGuardStateFormat;
  j["version"] = kGuardStateVersion;
  j["pid"] = state.pid;
  j["nvml_library"] = state.nvml_library;
  json& limits = j["limits"] = json::array();
  for (const GuardLimit& l : state.limits) {
    limits.push_back({{"nvml_index", l.nvml_index}, {"original_w", l.original_w}});
  }
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

Result<GuardState> GuardStateFromJson(std::string_view text, std::string_view path) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return Error::Input(fmt::format("{}: not JSON: {}", path, e.what()));
  }
  const auto bad = [&](std::string_view key, std::string_view what) {
    return Error::Input(fmt::format("{}: key '{}': {}", path, key, what));
  };
  if (!j.is_object()) return Error::Input(fmt::format("{}: expected a JSON object", path));
  if (!j.contains("format") || j["format"] != kGuardStateFormat) {
    return bad("format", fmt::format("expected \"{}\"", kGuardStateFormat));
  }
  if (!j.contains("version") || j["version"] != kGuardStateVersion) {
    return bad("version", fmt::format("expected {}", kGuardStateVersion));
  }
  GuardState s;
  if (!j.contains("pid") || !j["pid"].is_number_integer()) return bad("pid", "expected an integer");
  s.pid = j["pid"].get<long long>();
  if (!j.contains("nvml_library") || !j["nvml_library"].is_string()) {
    return bad("nvml_library", "expected a string");
  }
  s.nvml_library = j["nvml_library"].get<std::string>();
  if (!j.contains("limits") || !j["limits"].is_array()) return bad("limits", "expected an array");
  for (const json& l : j["limits"]) {
    if (!l.is_object() || !l.contains("nvml_index") || !l["nvml_index"].is_number_integer() ||
        l["nvml_index"].get<long long>() < 0 || l["nvml_index"].get<long long>() > kMaxNvmlIndex) {
      return bad("limits[].nvml_index",
                 fmt::format("expected an integer in [0, {}]", kMaxNvmlIndex));
    }
    if (!l.contains("original_w") || !l["original_w"].is_number() ||
        !(l["original_w"].get<double>() > 0.0) || l["original_w"].get<double>() > kMaxLimitW) {
      return bad("limits[].original_w", fmt::format("expected watts in (0, {}]", kMaxLimitW));
    }
    s.limits.push_back({l["nvml_index"].get<int>(), l["original_w"].get<double>()});
  }
  return s;
}

Status WriteGuardState(const std::string& path, const GuardState& state) {
  if (auto st = WriteFileAtomically(path, GuardStateToJson(state)); !st) {
    return Error::Io(fmt::format("cannot write the guard's state file: {}", st.error().message()));
  }
  return OkStatus();
}

Result<std::optional<GuardState>> ReadGuardState(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return std::optional<GuardState>();
  auto text = ReadFileCapped(path, kMaxSmallFileBytes);
  if (!text) return std::move(text).error();
  auto state = GuardStateFromJson(*text, path);
  if (!state) return std::move(state).error();
  return std::optional<GuardState>(std::move(*state));
}

Status RemoveGuardState(const std::string& path) {
  if (std::remove(path.c_str()) != 0 && errno != ENOENT) {
    return Error::Io(fmt::format("{}: cannot remove: {}", path, std::strerror(errno)));
  }
  return OkStatus();
}

Status CheckGuardStateWritable(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : path.substr(0, std::max<size_t>(slash, 1));
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    return Error::Usage(
        fmt::format("--guard-state: cannot write a state file in {}: {} (give --guard-state FILE)",
                    dir, std::strerror(errno)));
  }
  return OkStatus();
}

std::string DefaultGuardStatePath() {
  const char* dir = std::getenv("STATE_DIRECTORY");
  // systemd may list several, separated by ':'; the first is ours.
  std::string base =
      dir != nullptr && *dir != '\0' ? std::string(dir) : std::string(kDefaultStateDirectory);
  if (const size_t colon = base.find(':'); colon != std::string::npos) base.resize(colon);
  return base + "/" + std::string(kGuardStateFile);
}

Status RestoreGuardState(const std::string& path, const std::string& nvml_library,
                         const Logger& log) {
  auto state = ReadGuardState(path);
  if (!state) return std::move(state).error();
  if (!*state) {
    log(fmt::format("guard: no state file at {}: no power limit to restore", path));
    return OkStatus();
  }
  const GuardState& s = **state;
  std::vector<int> indices;
  for (const auto& l : s.limits) indices.push_back(l.nvml_index);
  log(fmt::format("guard: restoring the power limits that agent {} left in {}", s.pid, path));
  if (!indices.empty()) {
    auto nvml = telemetry::NvmlSource::Open(nvml_library, indices);
    if (!nvml) {
      return Error::Io(
          fmt::format("guard: cannot restore the limits in {}: {}", path, nvml.error().message()));
    }
    Status first = OkStatus();
    for (size_t i = 0; i < s.limits.size(); ++i) {
      const auto& l = s.limits[i];
      if (auto st = (*nvml)->SetPowerLimitW(static_cast<int>(i), l.original_w); !st) {
        log.Error(fmt::format("guard: {}", st.error().message()), {{"gpu", l.nvml_index}});
        if (first) first = std::move(st);
        continue;
      }
      log.Info(fmt::format("guard: GPU {}: power limit restored to {:.0f} W", l.nvml_index,
                           l.original_w),
               {{"gpu", l.nvml_index}, {"limit_w", l.original_w}});
    }
    if (!first) {
      return Error::Io(fmt::format("guard: {} kept: {}", path, first.error().message()));
    }
  }
  return RemoveGuardState(path);
}

std::unique_ptr<PowerLimitGuard> MakeNvmlGuard(telemetry::NvmlSource* nvml, double budget_w,
                                               const std::string& path,
                                               const std::string& nvml_library, long long pid,
                                               Logger log) {
  const std::vector<int> indices = nvml->indices();
  return std::make_unique<PowerLimitGuard>(
      [nvml](int gpu, double w) { return nvml->SetPowerLimitW(gpu, w); }, budget_w, 4, 0.02,
      [path, indices, nvml_library, pid](const std::vector<std::pair<int, double>>& originals) {
        GuardState state;
        state.pid = pid;
        state.nvml_library = nvml_library;
        for (const auto& [gpu, w] : originals) {
          state.limits.push_back({indices[static_cast<size_t>(gpu)], w});
        }
        return WriteGuardState(path, state);
      },
      [path, log] {
        if (auto st = RemoveGuardState(path); !st) log.Error(st.error().message());
      });
}

}  // namespace headroom::agent
