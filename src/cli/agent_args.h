// `headroom agent`'s flags (agent_command.cc registers them) and the run they start
// (agent_run.cc: the flags turned into the daemon's parts, agent/daemon.h).
#pragma once

#include <string>
#include <vector>

#include "agent/options.h"
#include "cli/server_options.h"
#include "cli_main/etcd_options.h"
#include "common/error.h"
#include "telemetry/nvml_source.h"

namespace headroom::cli {

// The flags: the agent's options (agent/options.h) and what only the command has.
struct AgentArgs {
  agent::AgentOptions o;
  std::string log_format = "text";  // --log-format
  std::string nvml_library = telemetry::kNvmlLibrary;
  ServerArgs server = ListeningOn("127.0.0.1:10470");  // --listen, the token, --allow-host, caps
  bool token_on_reads = false;
  std::string guard_state;
  bool restore_limits = false;
  EtcdOptions etcd_options;  // --etcd-cacert, --etcd-cert, --etcd-key, --etcd-user, ...
  std::vector<std::string> deprecations;  // renamed options given (cli/renamed_options.h)
};

Status RunAgent(const AgentArgs& a);

}  // namespace headroom::cli
