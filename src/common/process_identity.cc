#include "common/process_identity.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>

namespace headroom {
namespace {

std::string FirstLine(const char* path) {
  std::ifstream f(path);
  std::string line;
  if (!f || !std::getline(f, line)) return {};
  return line;
}

// Field 22 of /proc/<pid>/stat (after the command name, which may hold spaces and parentheses);
// "" for no process, or a zombie (dead, not yet reaped).
std::string StartTicks(long pid) {
  std::ifstream f(fmt::format("/proc/{}/stat", pid));
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return {};
    if (i == 3 && (field == "Z" || field == "X")) return {};
  }
  return field;
}

struct Here {
  std::string host, boot, pidns;
};

Here ThisHost() {
  Here h;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0) h.host = name;
  h.boot = FirstLine("/proc/sys/kernel/random/boot_id");
  struct stat st {};
  if (stat("/proc/self/ns/pid", &st) == 0) h.pidns = std::to_string(st.st_ino);
  return h;
}

// "k=v k=v ..." with no empty value and no repeated key; {} otherwise.
std::map<std::string, std::string> Fields(std::string_view identity) {
  std::map<std::string, std::string> out;
  std::istringstream in{std::string(identity)};
  std::string word;
  while (in >> word) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == word.size()) return {};
    if (!out.emplace(word.substr(0, eq), word.substr(eq + 1)).second) return {};
  }
  return out;
}

}  // namespace

std::string ProcessIdentity(long pid) {
  const Here h = ThisHost();
  const std::string start = StartTicks(pid);
  if (h.host.empty() || h.boot.empty() || h.pidns.empty() || start.empty()) return {};
  // Host names hold no spaces; one with '=' or whitespace would not parse: no identity then.
  if (h.host.find_first_of("= \t\n") != std::string::npos) return {};
  return fmt::format("host={} boot={} pidns={} pid={} start={}", h.host, h.boot, h.pidns, pid,
                     start);
}

std::string ThisProcessIdentity() { return ProcessIdentity(static_cast<long>(getpid())); }

bool IdentityGoneHere(std::string_view identity) {
  const auto f = Fields(identity);
  for (const char* key : {"host", "boot", "pidns", "pid", "start"}) {
    if (!f.contains(key)) return false;
  }
  const Here h = ThisHost();
  if (h.host.empty() || h.boot.empty() || h.pidns.empty()) return false;
  if (f.at("host") != h.host || f.at("boot") != h.boot || f.at("pidns") != h.pidns) return false;
  long pid = 0;
  try {
    size_t used = 0;
    pid = std::stol(f.at("pid"), &used);
    if (used != f.at("pid").size() || pid <= 0) return false;
  } catch (...) {
    return false;
  }
  // Gone when no process has that pid, or the one that has it started at another time.
  const std::string start = StartTicks(pid);
  return start.empty() || start != f.at("start");
}

}  // namespace headroom
