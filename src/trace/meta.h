// The `<trace>.meta.json` sidecar: what the rows of a trace do not say.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "trace/schema.h"

namespace headroom::trace {

// The sidecar path headroom writes for a trace: `<trace>.meta.json`.
std::string MetaPathFor(const std::string& trace_path);

// Parses sidecar JSON. Keys: gpu_model, nameplate_w (> 0, per GPU), sample_interval_s (> 0),
// job, notes. Unknown keys are reported in `warnings`; wrong types and values are errors naming
// `name` and the key.
Result<TraceMeta> ParseMeta(std::string_view json_text, std::string_view name,
                            std::vector<std::string>* warnings);

// Loads the sidecar of `trace_path` if there is one: `<trace>.meta.json`, else the same with the
// trace's extension replaced (`run.csv` -> `run.meta.json`). No sidecar: nullopt.
Result<std::optional<TraceMeta>> LoadMetaFor(const std::string& trace_path,
                                             std::vector<std::string>* warnings);

std::string MetaToJson(const TraceMeta& meta);

}  // namespace headroom::trace
