// Options renamed ("fleet" was the live site; it is "site" now, "fleet" only the offline
// composition): the old name keeps working for a release, bound to the same value and hidden
// from --help; a command that was given one says so (one line each, DeprecationNotes).
#pragma once

#include <CLI/CLI.hpp>
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

// "--fleet is deprecated: use --site-etcd (--fleet goes in a later release)" for each renamed
// option given (on the command line or in a --config file).
inline std::vector<std::string> DeprecationNotes(const CLI::App& app) {
  std::vector<std::string> notes;
  for (const CLI::Option* o : app.get_options()) {
    const std::string& d = o->get_description();
    if (o->count() == 0 || d.rfind(kRenamedPrefix, 0) != 0) continue;
    const std::string old_name = "--" + o->get_lnames().front();
    notes.push_back(old_name + " is deprecated: use " +
                    d.substr(std::string(kRenamedPrefix).size()) + " (" + old_name +
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
