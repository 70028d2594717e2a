// The scenarios of scenarios/*.toml, embedded at build time (see src/twin/CMakeLists.txt).
#pragma once

#include <span>
#include <string_view>

namespace headroom::twin {

struct BuiltinScenario {
  std::string_view name;
  std::string_view text;
};

extern const std::span<const BuiltinScenario> kBuiltinScenarios;

}  // namespace headroom::twin
