#include "cli/token_options.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

#include "common/read_file.h"

namespace headroom::cli {

namespace {

constexpr size_t kMaxTokenBytes = 4096;

Status CheckToken(const std::string& token, std::string_view where) {
  if (token.empty()) return Error::Usage(fmt::format("{}: the token is empty", where));
  if (token.size() > kMaxTokenBytes) {
    return Error::Usage(
        fmt::format("{}: the token is longer than {} bytes", where, kMaxTokenBytes));
  }
  for (char c : token) {
    if (c <= ' ' || c == 0x7f) {
      return Error::Usage(fmt::format(
          "{}: the token may hold visible ASCII only (no spaces or control bytes)", where));
    }
  }
  return OkStatus();
}

}  // namespace

// The bearer token: --token-file, else HEADROOM_TOKEN, else --token (which every user of the
// machine can read in the process list: a warning says so).
Result<std::string> ResolveToken(const TokenArgs& args, const Logger& log) {
  if (!args.token.empty() && !args.token_file.empty()) {
    return Error::Usage("--token and --token-file: give one");
  }
  if (!args.token_file.empty()) {
    auto read = ReadRegularFileCapped(args.token_file, kMaxSmallFileBytes, "--token-file");
    if (!read) return std::move(read).error();
    std::string token = std::move(*read);
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
    if (auto st = CheckToken(token, "--token-file " + args.token_file); !st)
      return std::move(st).error();
    if (ReadableByOthers(args.token_file)) {
      log.Warn(fmt::format("--token-file {} is readable by other users (chmod 600 it)",
                           args.token_file));
    }
    return token;
  }
  if (const char* env = std::getenv("HEADROOM_TOKEN");
      env != nullptr && *env != '\0' && args.token.empty()) {
    std::string token(env);
    if (auto st = CheckToken(token, "HEADROOM_TOKEN"); !st) return std::move(st).error();
    return token;
  }
  if (!args.token.empty()) {
    if (auto st = CheckToken(args.token, "--token"); !st) return std::move(st).error();
    log.Warn(
        "--token is visible to every user of this machine (ps); prefer --token-file "
        "or HEADROOM_TOKEN");
  }
  return args.token;
}

}  // namespace headroom::cli
