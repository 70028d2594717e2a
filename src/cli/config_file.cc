#include "cli/config_file.h"

#include <fmt/format.h>

#include <toml++/toml.h>
#include <optional>
#include <vector>

#include "common/read_file.h"

namespace headroom::cli {

Status ApplyConfigFile(CLI::App& app, const std::string& path, std::string_view command) {
  auto file = ReadFileCapped(path, kMaxSmallFileBytes, "--config");
  if (!file) return std::move(file).error();
  toml::table root;
  try {
    root = toml::parse(*file, path);
  } catch (const toml::parse_error& e) {
    return Error::Input(fmt::format("{}:{}:{}: {}", path, e.source().begin.line,
                                    e.source().begin.column, e.description()));
  }
  for (const auto& [key, node] : root) {
    const std::string name(key.str());
    const auto line = node.source().begin.line;
    CLI::Option* opt = nullptr;
    try {
      opt = app.get_option("--" + name);
    } catch (const CLI::Error&) {
      opt = nullptr;
    }
    if (opt == nullptr || name == "config") {
      return Error::Usage(
          fmt::format("{}:{}: key '{}': not an option of headroom {}", path, line, name, command));
    }
    if (opt->count() > 0) continue;  // given on the command line
    std::vector<std::string> values;
    auto text = [](const toml::node& n) -> std::optional<std::string> {
      if (auto v = n.value<std::string>()) return *v;
      if (auto v = n.value<int64_t>()) return std::to_string(*v);
      if (auto v = n.value<double>()) return fmt::format("{}", *v);
      if (auto v = n.value<bool>()) return *v ? "true" : "false";
      return std::nullopt;
    };
    if (const auto* arr = node.as_array()) {
      for (const auto& item : *arr) {
        auto t = text(item);
        if (!t)
          return Error::Usage(
              fmt::format("{}:{}: key '{}': expected plain values", path, line, name));
        values.push_back(*t);
      }
    } else if (auto t = text(node)) {
      values.push_back(*t);
    } else {
      return Error::Usage(fmt::format("{}:{}: key '{}': expected a value", path, line, name));
    }
    try {
      for (const auto& v : values) opt->add_result(v);
      opt->run_callback();
    } catch (const CLI::Error& e) {
      return Error::Usage(fmt::format("{}:{}: key '{}': {}", path, line, name, e.what()));
    }
  }
  return OkStatus();
}

}  // namespace headroom::cli
