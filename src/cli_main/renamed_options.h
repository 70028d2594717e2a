// Options renamed ("fleet" was the live site; it is "site" now, "fleet" only the offline
// composition): the old name keeps working for a release, bound to the same value and hidden
// from --help; a command that was given one says so (one line each, DeprecationNotes). Both names
// are one option: in a --config file neither overrides the other given on the command line
// (cli/config_file.h).
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace headroom::cli {

inline constexpr const char* kRenamedGroup = "";  // hidden from --help
inline constexpr const char* kRenamedPrefix = "renamed: ";

// `old_name` as another name of `value`, whose option is `new_name`.
template <class T>
CLI::Option* AddRenamedOption(CLI::App& app, const std::string& old_name,
                              const std::string& new_name, T* value) {
  return app.add_option(old_name, *value, kRenamedPrefix + new_name)->group(kRenamedGroup);
}
inline CLI::Option* AddRenamedFlag(CLI::App& app, const std::string& old_name,
                                   const std::string& new_name, bool* value) {
  return app.add_flag(old_name, *value, kRenamedPrefix + new_name)->group(kRenamedGroup);
}

// The option `o` is another name of ("--site-etcd"); empty when `o` is no renamed option.
inline std::string RenamedTo(const CLI::Option& o) {
  const std::string& d = o.get_description();
  if (d.rfind(kRenamedPrefix, 0) != 0) return {};
  return d.substr(std::string(kRenamedPrefix).size());
}

// The name of the value `o` sets, whichever of its names it is: "--site-etcd" for --fleet too.
inline std::string CanonicalName(const CLI::Option& o) {
  std::string renamed = RenamedTo(o);
  return renamed.empty() ? "--" + o.get_lnames().front() : renamed;
}

// "--fleet is deprecated: use --site-etcd (--fleet goes in a later release)", once for each
// renamed option given: on the command line, or in a --config file (`in_config`: their names,
// "--fleet", as ApplyConfigFile returns them; given there, whether or not the command line or
// the new name overrode them).
inline std::vector<std::string> DeprecationNotes(const CLI::App& app,
                                                 const std::vector<std::string>& in_config = {}) {
  std::vector<std::string> notes;
  for (const CLI::Option* o : app.get_options()) {
    const std::string new_name = RenamedTo(*o);
    if (new_name.empty()) continue;
    const std::string old_name = "--" + o->get_lnames().front();
    const bool in_file = std::find(in_config.begin(), in_config.end(), old_name) != in_config.end();
    if (o->count() == 0 && !in_file) continue;
    notes.push_back(old_name + " is deprecated: use " + new_name + " (" + old_name +
                    " goes in a later release)");
  }
  return notes;
}

// `run`, after one stderr line "PROGRAM: warning: NOTE" for each renamed option given.
template <class Run>
auto SayingDeprecations(const CLI::App& app, const char* program, Run run) {
  return [&app, program, run] {
    for (const std::string& note : DeprecationNotes(app)) {
      std::fprintf(stderr, "%s: warning: %s\n", program, note.c_str());
    }
    return run();
  };
}

}  // namespace headroom::cli
