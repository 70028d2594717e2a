// The options of the commands that serve HTTP (agent, coordinator), and their checks, in one
// place: --listen, the bearer token (token_options.h), --allow-host, --insecure-listen and the
// connection caps. What they become is src/net's: a ListenAddress, an AccessPolicy, limits.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/token_options.h"
#include "common/error.h"
#include "common/log.h"
#include "net/listen.h"
#include "net/policy.h"
#include "net/server.h"

namespace headroom::cli {

struct ServerArgs {
  std::string listen;  // the command's default (ListeningOn), set before AddServerOptions
  TokenArgs token;
  std::vector<std::string> allow_hosts;
  bool insecure_listen = false;
  int max_connections = net::ServerLimits{}.max_connections;
  int max_connections_per_address = net::ServerLimits{}.max_connections_per_address;
};

// The defaults, listening on `listen` ("127.0.0.1:10470").
ServerArgs ListeningOn(std::string listen);

// `who` names the daemon in the help texts ("agent", "replica").
void AddServerOptions(CLI::App& app, ServerArgs* args, std::string_view who);

struct Serving {
  net::ListenAddress listen;
  net::AccessPolicy access;  // the token and the allowed hosts; token_on_reads is the caller's
  int max_connections = 0;
  int max_connections_per_address = 0;
};

// Checks them before anything is opened or bound, each failure one line naming its flag:
// --listen parses; the token is resolved; beyond loopback, a token or --insecure-listen
// (`exposed` says what anyone who can reach it could then do); --allow-host values are names.
Result<Serving> ResolveServerOptions(const ServerArgs& args, const Logger& log,
                                     std::string_view exposed);

}  // namespace headroom::cli
