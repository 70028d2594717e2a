#include "trace/meta.h"

#include <fmt/format.h>
#include "common/read_file.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace headroom::trace {

std::string MetaPathFor(const std::string& trace_path) { return trace_path + ".meta.json"; }

namespace {

// Line and column (from 1) of a byte offset.
std::pair<int64_t, int> LineColumn(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  int64_t line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return {line, static_cast<int>(offset - line_start + 1)};
}

}  // namespace

Result<TraceMeta> ParseMeta(std::string_view json_text, std::string_view name,
                            std::vector<std::string>* warnings) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json_text.begin(), json_text.end());
  } catch (const nlohmann::json::parse_error& e) {
    const auto [line, column] = LineColumn(json_text, e.byte > 0 ? e.byte - 1 : 0);
    return Error::Input(LocatedMessage(name, line, column, "", "not valid JSON"));
  }
  if (!doc.is_object()) return Error::Input(fmt::format("{}: expected a JSON object", name));
  TraceMeta meta;
  const auto bad = [&](std::string_view key, std::string_view what) {
    return Error::Input(fmt::format("{}: key '{}': {}", name, key, what));
  };
  for (const auto& [key, value] : doc.items()) {
    if (key == "gpu_model" || key == "job" || key == "notes") {
      if (value.is_null()) continue;
      if (!value.is_string()) return bad(key, "expected a string");
      auto& slot = key == "gpu_model" ? meta.gpu_model : key == "job" ? meta.job : meta.notes;
      slot = value.get<std::string>();
    } else if (key == "nameplate_w" || key == "sample_interval_s") {
      if (value.is_null()) continue;
      if (!value.is_number()) return bad(key, "expected a number");
      const double v = value.get<double>();
      if (!std::isfinite(v) || v <= 0.0) return bad(key, fmt::format("must be > 0, got {}", v));
      (key == "nameplate_w" ? meta.nameplate_w : meta.sample_interval_s) = v;
    } else if (warnings != nullptr) {
      warnings->push_back(fmt::format("{}: unknown key '{}' ignored", name, key));
    }
  }
  return meta;
}

Result<std::optional<TraceMeta>> LoadMetaFor(const std::string& trace_path,
                                             std::vector<std::string>* warnings) {
  namespace fs = std::filesystem;
  std::vector<std::string> candidates = {MetaPathFor(trace_path)};
  const fs::path p(trace_path);
  if (p.has_extension()) {
    candidates.push_back(fs::path(p).replace_extension(".meta.json").string());
  }
  for (const auto& candidate : candidates) {
    std::error_code ec;
    if (!fs::is_regular_file(candidate, ec)) continue;
    auto text = ReadFileCapped(candidate, kMaxSmallFileBytes);
    if (!text) return std::move(text).error();
    auto meta = ParseMeta(*text, candidate, warnings);
    if (!meta) return std::move(meta).error();
    return std::optional<TraceMeta>(std::move(meta).value());
  }
  return std::optional<TraceMeta>();
}

std::string MetaToJson(const TraceMeta& meta) {
  nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  if (meta.gpu_model) doc["gpu_model"] = *meta.gpu_model;
  if (meta.nameplate_w) doc["nameplate_w"] = *meta.nameplate_w;
  if (meta.sample_interval_s) doc["sample_interval_s"] = *meta.sample_interval_s;
  if (meta.job) doc["job"] = *meta.job;
  if (meta.notes) doc["notes"] = *meta.notes;
  return doc.dump(2) + "\n";
}

}  // namespace headroom::trace
