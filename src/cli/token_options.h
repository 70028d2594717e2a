// The bearer token of a server command (agent, coordinator): --token-file, else
// HEADROOM_TOKEN, else --token; checked (visible ASCII, at most 4 KiB) with one clear line.
#pragma once

#include <functional>
#include <string>

#include "common/error.h"
#include "common/log.h"

namespace headroom::cli {

struct TokenArgs {
  std::string token;       // --token
  std::string token_file;  // --token-file
};

// Empty: no token. Warns through `log` of a token on the command line or a token file others
// can read.
Result<std::string> ResolveToken(const TokenArgs& args, const Logger& log);

}  // namespace headroom::cli
