#include "cli/config_file.h"

#include <fmt/format.h>

#include <toml++/toml.h>
#include <optional>
#include <set>

#include "cli_main/renamed_options.h"
#include "common/read_file.h"

namespace headroom::cli {

namespace {

// What an option takes from the file.
enum class Expected { kBoolean, kNumber, kString };

Expected ExpectedOf(const CLI::Option& opt) {
  if (opt.get_expected_max() == 0) return Expected::kBoolean;  // a flag
  std::string type = opt.get_type_name();                      // "FLOAT:[0.01, 60]"
  type = type.substr(0, type.find(':'));
  if (type == "FLOAT" || type == "INT" || type == "UINT") return Expected::kNumber;
  return Expected::kString;
}

const char* ExpectedName(Expected e) {
  switch (e) {
    case Expected::kBoolean:
      return "a boolean (true or false)";
    case Expected::kNumber:
      return "a number";
    case Expected::kString:
      break;
  }
  return "a string";
}

const char* TomlTypeName(toml::node_type t) {
  switch (t) {
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::date:
    case toml::node_type::time:
    case toml::node_type::date_time:
      return "a date or time";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

// One TOML value as the option's text, when its type is the one the option takes; else why not
// ("expected a number, not a boolean"). Exact types: toml++'s value<int64_t>() reads true as 1.
Result<std::string> TextOf(const toml::node& n, Expected expected) {
  switch (n.type()) {
    case toml::node_type::boolean:
      if (expected == Expected::kBoolean)
        return std::string(*n.value_exact<bool>() ? "true" : "false");
      break;
    case toml::node_type::integer:
      if (expected == Expected::kNumber) return std::to_string(*n.value_exact<int64_t>());
      break;
    case toml::node_type::floating_point:
      if (expected == Expected::kNumber) return fmt::format("{}", *n.value_exact<double>());
      break;
    case toml::node_type::string:
      if (expected == Expected::kString) return std::string(*n.value_exact<std::string>());
      break;
    default:
      break;
  }
  return Error::Usage(
      fmt::format("expected {}, not {}", ExpectedName(expected), TomlTypeName(n.type())));
}

// The option's values from one key: an array gives a repeated option.
Result<std::vector<std::string>> ValuesOf(const toml::node& node, Expected expected) {
  std::vector<std::string> values;
  if (const auto* arr = node.as_array()) {
    for (const auto& item : *arr) {
      auto t = TextOf(item, expected);
      if (!t) return std::move(t).error();
      values.push_back(std::move(*t));
    }
    return values;
  }
  auto t = TextOf(node, expected);
  if (!t) return std::move(t).error();
  values.push_back(std::move(*t));
  return values;
}

CLI::Option* FindOption(CLI::App& app, const std::string& name) {
  if (name == "config") return nullptr;
  try {
    return app.get_option("--" + name);
  } catch (const CLI::Error&) {
    return nullptr;
  }
}

// The options the command line gave, each by the name of the value it sets (--fleet as
// --site-etcd).
std::set<std::string> GivenOnTheCommandLine(const CLI::App& app) {
  std::set<std::string> given;
  for (const CLI::Option* o : app.get_options()) {
    if (o->count() > 0) given.insert(CanonicalName(*o));
  }
  return given;
}

}  // namespace

Result<std::vector<std::string>> ApplyConfigFile(CLI::App& app, const std::string& path,
                                                 std::string_view command) {
  auto file = ReadRegularFileCapped(path, kMaxSmallFileBytes, "--config");
  if (!file) return std::move(file).error();
  toml::table root;
  try {
    root = toml::parse(*file, path);
  } catch (const toml::parse_error& e) {
    return Error::Input(fmt::format("{}:{}:{}: {}", path, e.source().begin.line,
                                    e.source().begin.column, e.description()));
  }
  const std::set<std::string> given = GivenOnTheCommandLine(app);
  std::set<std::string> keys;
  for (const auto& [key, node] : root) keys.insert("--" + std::string(key.str()));
  std::vector<std::string> renamed_in_file;
  for (const auto& [key, node] : root) {
    const std::string name(key.str());
    const auto line = node.source().begin.line;
    const auto fail = [&](std::string_view why) {
      return Error::Usage(fmt::format("{}:{}: key '{}': {}", path, line, name, why));
    };
    CLI::Option* opt = FindOption(app, name);
    if (opt == nullptr) return fail(fmt::format("not an option of headroom {}", command));
    const std::string canonical = CanonicalName(*opt);
    const bool renamed = !RenamedTo(*opt).empty();
    if (renamed) renamed_in_file.push_back("--" + name);
    if (given.count(canonical) > 0) continue;            // the command line wins, by either name
    if (renamed && keys.count(canonical) > 0) continue;  // in the file, the new name wins
    auto values = ValuesOf(node, ExpectedOf(*opt));
    if (!values) return fail(values.error().message());
    try {
      for (const auto& v : *values) opt->add_result(v);
      opt->run_callback();
    } catch (const CLI::Error& e) {
      return fail(e.what());
    }
  }
  return renamed_in_file;
}

}  // namespace headroom::cli
