// The power-limit guard's state file: the limits the GPUs had before the guard changed any,
// written before the first change and removed once every limit is back (guard.h). Whoever finds
// it — `headroom agent --restore-limits` (systemd's ExecStopPost), or the next agent with
// --guard-power-limit before it starts — puts those limits back.
//
//   {"format": "headroom-guard-state", "version": 1, "pid": 1234,
//    "nvml_library": "libnvidia-ml.so.1",
//    "limits": [{"nvml_index": 0, "original_w": 400.0}, ...]}
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/guard.h"
#include "common/error.h"
#include "common/log.h"
#include "telemetry/nvml_source.h"

namespace headroom::agent {

inline constexpr std::string_view kGuardStateFormat = "headroom-guard-state";
inline constexpr int kGuardStateVersion = 1;
inline constexpr std::string_view kGuardStateFile = "guard-state.json";
inline constexpr std::string_view kDefaultStateDirectory = "/var/lib/headroom";

struct GuardLimit {
  int nvml_index = 0;
  double original_w = 0.0;
};

struct GuardState {
  long long pid = 0;  // of the agent that wrote it
  std::string nvml_library;
  std::vector<GuardLimit> limits;
};

std::string GuardStateToJson(const GuardState& state);
// `path` names the file in errors; every field is checked (an index in [0, 1023], a limit in
// (0, 10000] W).
Result<GuardState> GuardStateFromJson(std::string_view text, std::string_view path);

// Written atomically (complete or absent).
Status WriteGuardState(const std::string& path, const GuardState& state);
// nullopt when there is no file.
Result<std::optional<GuardState>> ReadGuardState(const std::string& path);
Status RemoveGuardState(const std::string& path);
// Whether a state file can be written there: the directory exists and takes a new file.
Status CheckGuardStateWritable(const std::string& path);

// $STATE_DIRECTORY/guard-state.json (systemd's StateDirectory=), else
// /var/lib/headroom/guard-state.json.
std::string DefaultGuardStatePath();

// Puts back the limits the state file at `path` holds, through the NVML library at
// `nvml_library`, then removes it. No file: nothing to do (said on `log`). `headroom agent
// --restore-limits`, and every guarded agent before it reads any limit as "original".
Status RestoreGuardState(const std::string& path, const std::string& nvml_library,
                         const Logger& log);

// The guard over `nvml`'s GPUs at `budget_w` per GPU, persisting the originals to `path` before
// any change (as process `pid`) and removing it after a full restore. `nvml` outlives it.
std::unique_ptr<PowerLimitGuard> MakeNvmlGuard(telemetry::NvmlSource* nvml, double budget_w,
                                               const std::string& path,
                                               const std::string& nvml_library, long long pid,
                                               Logger log);

}  // namespace headroom::agent
