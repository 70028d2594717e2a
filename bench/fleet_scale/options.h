// headroom_fleet_scale's options and constants (bench/fleet_scale.cc reads top to bottom; this is
// one part).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>
#include "common/thread_annotations.h"
#include "coord/forwarding_store.h"
#include "coord/layout.h"
#include "coord/member.h"
#include "coord/memory_store.h"
#include "coord/plan.h"
#include "coord/store.h"
#include "etcd/etcd_store.h"
#include "etcd/etcd_wire.h"
#include "tests/support/etcd_cluster.h"

namespace headroom::bench {

using coord::Acting;
using json = nlohmann::ordered_json;

// ---- Options ----

struct Options {
  std::string headroom = "build/bin/headroom";  // the binary whose `coordinator` is measured
  int agents = 1000;              // simulated agents (coord::SiteMember), in this process
  int stores = 32;                // EtcdStore connections, one thread each
  double duration_s = 60.0;       // the measured steady phase
  double step_s = 0.25;           // each member's Step + Current + Observe (the agent's rate)
  double change_every_s = 10.0;   // site budget changes, alternately lower and higher
  double low_fraction = 0.4;      // site budgets: floors + fraction x (demand - floors)
  double high_fraction = 0.6;     // (the first is the start's)
  double probe_every_s = 5.0;     // the bench's own read of the site, timed part by part
  double admit_timeout_s = 90.0;  // until every member acts on a grant
  double settle_s = 3.0;          // after that, before the phase
  double etcd_timeout_s = 2.0;    // each store's connect / answer timeout
  // Members watch their grant (a stream each, as agents do) and read it every 10 s besides; with
  // --poll, they read it at every step instead (the agents before issue 32's item 7).
  bool watch = true;
  uint64_t seed = 1;      // floors and nameplates
  std::string json_path;  // also write the results here
  // Two levels (issue 55, item 3): this many domains, each a coordinator on an etcd of its own,
  // members of the site's coordinator on a parent etcd; agent i in domain i % domains. 0: one
  // level (every agent a member of the site's coordinator).
  int domains = 0;
};

inline constexpr const char* kSite = "scale";
inline constexpr double kPeriodS = 1.0;
inline constexpr int64_t kLeaseTtlS = 3;
inline constexpr double kFloorMinW = 100.0, kFloorMaxW = 300.0;
inline constexpr double kNameplateMinW = 400.0, kNameplateMaxW = 1000.0;
inline constexpr double kStartWaitS = 20.0;           // the coordinator's port, then its leadership
inline constexpr double kChainGapMaxS = 3.0;          // ledger writes closer than this: one chain
inline constexpr double kInvariantTolW = 1e-6;        // per member: rounding
inline constexpr double kGrantReadWithWatchS = 10.0;  // as the agent (agent/options.cc)
inline constexpr double kGrantQuietS = 30.0;          // as the agent
// A domain's site budget at its start, before its first grant from the site: its agents' floors
// + this fraction of their demand above (the domain declares it as its floor until granted, so
// the site's start budget must hold every domain's).
inline constexpr double kDomainStartFraction = 0.1;
inline constexpr double kCutLowerTolW = 1e-6;  // a grant lower than the one acted on: by more

// Domain d's site name (its --site, its job name at the parent).
inline std::string DomainName(int d) { return fmt::format("dom-{}", d); }
// The site agent i is a member of: the site, or (with --domains) its domain's.
inline std::string AgentSite(const Options& o, int i) {
  return o.domains > 0 ? DomainName(i % o.domains) : std::string(kSite);
}

}  // namespace headroom::bench
