#include "cli/server_options.h"

#include <fmt/format.h>

#include "cli/numbers.h"

namespace headroom::cli {

ServerArgs ListeningOn(std::string listen) {
  ServerArgs args;
  args.listen = std::move(listen);
  return args;
}

void AddServerOptions(CLI::App& app, ServerArgs* args, std::string_view who) {
  app.add_option("--listen", args->listen,
                 fmt::format("HOST:PORT of the {}'s API (port 0: any free port)", who));
  app.add_option("--token", args->token.token,
                 "Bearer token required on POST (visible in ps: prefer --token-file or "
                 "HEADROOM_TOKEN)");
  app.add_option("--token-file", args->token.token_file,
                 "File holding the bearer token (chmod 600)");
  app.add_option("--allow-host", args->allow_hosts,
                 fmt::format("A name this {} is reached by, accepted in Host (besides IP "
                             "literals and localhost); repeatable",
                             who));
  app.add_flag("--insecure-listen", args->insecure_listen,
               "Allow --listen beyond loopback without a token");
  app.add_option("--max-connections", args->max_connections, "Connections open at once")
      ->check(Integer(16, 65536));
  app.add_option("--max-connections-per-address", args->max_connections_per_address,
                 "Connections open at once from one client address")
      ->check(Integer(1, 65536));
}

Result<Serving> ResolveServerOptions(const ServerArgs& args, const Logger& log,
                                     std::string_view exposed) {
  Serving s;
  auto listen = net::ParseListen(args.listen);
  if (!listen) return Error::Usage("--listen: " + listen.error().message());
  s.listen = std::move(*listen);
  auto token = ResolveToken(args.token, log);
  if (!token) return std::move(token).error();
  if (!net::IsLoopbackHost(s.listen.host) && token->empty() && !args.insecure_listen) {
    return Error::Usage(
        fmt::format("--listen {}: beyond loopback without a token; give --token-file (or "
                    "HEADROOM_TOKEN), or --insecure-listen to let anyone who can reach it {}",
                    args.listen, exposed));
  }
  for (const std::string& host : args.allow_hosts) {
    if (host.empty() || host.find_first_of(" \t/:@") != std::string::npos) {
      return Error::Usage(fmt::format("--allow-host '{}': expected a host name", host));
    }
  }
  s.access.token = std::move(*token);
  s.access.allowed_hosts = args.allow_hosts;
  s.max_connections = args.max_connections;
  s.max_connections_per_address = args.max_connections_per_address;
  return s;
}

}  // namespace headroom::cli
