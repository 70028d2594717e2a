# Writes OUTPUT: a C++ file holding every scenarios/*.toml as a built-in scenario.
file(GLOB files "${SCENARIO_DIR}/*.toml")
list(SORT files)
set(body "")
foreach(f ${files})
  get_filename_component(name "${f}" NAME_WE)
  file(READ "${f}" text)
  string(APPEND body "    {\"${name}\", R\"headroom_toml(${text})headroom_toml\"},\n")
endforeach()
file(WRITE "${OUTPUT}.tmp"
"// Generated from scenarios/*.toml by src/twin/embed_scenarios.cmake. Do not edit.
#include \"twin/builtin_scenarios.h\"

namespace headroom::twin {
namespace {
constexpr BuiltinScenario kAll[] = {
${body}};
}  // namespace
const std::span<const BuiltinScenario> kBuiltinScenarios(kAll);
}  // namespace headroom::twin
")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUTPUT}.tmp" "${OUTPUT}")
