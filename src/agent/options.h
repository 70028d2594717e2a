// The agent's options as plain values, and what they derive: the agent's config, its controller,
// its place in a site. No flags, files or clocks here: `headroom agent` parses the flags and
// opens what they name (cli/agent_command.cc); a test gives values. docs/AGENT.md lists them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/agent.h"
#include "agent/budget.h"
#include "common/error.h"
#include "common/log.h"
#include "control/factory.h"
#include "control/policy.h"
#include "coord/member.h"

namespace headroom::agent {

// Without a scenario or a policy's envelope (--source nvml or replay with pid or uncontrolled):
// the agent's own ranges, documented in docs/AGENT.md.
inline constexpr std::pair<int, int> kDefaultConcurrencyRange = {1, 256};
inline constexpr std::pair<int, int> kDefaultGroupSizeRange = {1, 64};

struct AgentOptions {
  std::string source;  // nvml, replay or twin: no default (a forgotten --source must not steer)
  std::string scenario;
  uint64_t seed = 1;
  std::string replay;
  std::vector<int> gpus;
  double speed = 1.0;
  double interval_s = 0.5;
  std::optional<double> budget_w;  // per GPU
  std::optional<double> floor_w;   // per GPU
  std::string controller = "pid";
  std::string policy;
  std::vector<int> concurrency_range;  // empty or {low, high}
  std::vector<int> group_size_range;
  std::optional<int> safe_concurrency;
  std::optional<int> safe_group_size;
  std::optional<int> initial_concurrency;
  std::optional<int> initial_group_size;
  std::string group_size_choices;
  int group_size_min_steps = 10;
  double valid_for_s = 5.0;
  // A trainer that reported and then is silent this long (wall seconds) is taken as gone.
  double report_timeout_s = 60.0;
  // The longest hold before a step passed on to the trainer (/v1/status max_hold_s).
  double max_hold_s = 300.0;
  std::string trace_out;
  std::optional<double> duration_s;
  bool guard_power_limit = false;
  bool twin_follows_trainer = false;
  // A member of a site (docs/SITE.md).
  std::string site_etcd;  // --site-etcd: etcd://HOST:PORT[,...] or etcds://
  std::string site;
  std::string job;
  int64_t lease_ttl_s = 3;
  std::optional<double> node_overhead_w;
  std::optional<double> nameplate_w;  // per GPU
  std::optional<double> standby_w;    // per GPU
  std::optional<double> update_w;     // per GPU: the update's unconstrained power
  bool site_fail_open = false;
  std::string site_log;

  bool in_site() const { return !site_etcd.empty(); }
};

// The combinations of options that cannot run, each refused with one line naming the option.
Status CheckAgentOptions(const AgentOptions& o);

// The envelope a policy acts in (control/policy.h): the one named by `scenario`, or its only one
// when `scenario` is empty. Null with `scenario` named but not in the policy (the caller takes
// the scenario's own, with a warning); a Usage error when it has several and none is named.
Result<const control::PolicyEnvelope*> EnvelopeFor(const control::Policy& policy,
                                                   const std::string& policy_path,
                                                   const std::string& scenario);

// The fencing margin of a lease: a member trusts its decisions no longer than TTL - margin.
double FenceMarginS(int64_t lease_ttl_s);

// The agent's config from the options and what the job is like (`job`: a scenario's or a
// policy's envelope; null: the agent's own defaults). Its budget is 0 when neither the options
// nor `job` give one (the caller reads the GPUs' enforced limit: --source nvml).
Result<AgentConfig> DeriveConfig(const AgentOptions& o, const control::PolicyEnvelope* job);

// The controller's spec (control/factory.h). `policy` with --controller ppo (and `job` then).
Result<control::ControllerSpec> DeriveController(const AgentOptions& o, const AgentConfig& config,
                                                 const control::PolicyEnvelope* job,
                                                 const control::Policy* policy);

// What a member's config is made from, beside the options (per GPU unless named).
struct MemberFacts {
  int gpus = 1;
  double overhead_w = 0.0;  // the node's, now
  std::pair<double, double> budget_range_w{kMinBudgetPerGpuW, kMaxBudgetPerGpuW};
  std::optional<std::pair<double, double>> limit_range_w;  // the GPUs' (NVML), averaged
  std::optional<double> floor_w;                           // known without the option: the twin's
  std::optional<double> nameplate_w;                       // the scenario's or the envelope's
  std::optional<double> standby_w;                         // the twin's idle, loaded
  std::optional<double> update_w;                          // the twin's log-prob/train power
  std::optional<double> measured_w;  // the GPUs' mean power at start; none: unread
  std::string holder;                // this process (common/process_identity.h)
};

// The member's config: floor, nameplate, standby and local budget in whole-job watts. `log` gets
// where standby came from.
Result<coord::MemberConfig> DeriveMember(const AgentOptions& o, const MemberFacts& f,
                                         const Logger& log);

}  // namespace headroom::agent
