// headroom_fleet_scale's simulated agents and the store that records their calls
// (bench/fleet_scale.cc reads top to bottom; this is one part).
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
#include "bench/fleet_scale/system.h"
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

// ---- The site's agents ----

inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
inline double Uniform(uint64_t seed, uint64_t i, uint64_t k) {
  return static_cast<double>(SplitMix64(seed * 0x100000001b3ULL + i * 16 + k) >> 11) * 0x1p-53;
}

inline coord::MemberConfig AgentConfig(const Options& o, int i) {
  coord::MemberConfig c;
  c.site = AgentSite(o, i);
  c.job = fmt::format("job-{:04d}", i);
  c.gpus = 8;
  const auto u = static_cast<uint64_t>(i);
  c.floor_w = kFloorMinW + (kFloorMaxW - kFloorMinW) * Uniform(o.seed, u, 0);
  c.nameplate_w = kNameplateMinW + (kNameplateMaxW - kNameplateMinW) * Uniform(o.seed, u, 1);
  c.local_budget_w = c.floor_w;
  c.lease_ttl_s = kLeaseTtlS;
  if (o.watch) c.grant_read_s = kGrantReadWithWatchS;
  return c;
}

// What Current() returned, kept at every change (sequence, state or budget).
struct ActRecord {
  double t_s = 0;
  int64_t seq = 0;
  double budget_w = 0;
  Acting::State state = Acting::State::kLocal;
};

struct SimAgent {
  coord::MemberConfig config;
  std::unique_ptr<coord::SiteMember> member;
  double phase_rad = 0;
  // Written by its worker and its watch thread, in time order; read after both are joined.
  std::unique_ptr<std::mutex> acts_mu = std::make_unique<std::mutex>();
  std::vector<ActRecord> acts;
  std::thread watch;  // with Options::watch: WatchGrant, again and again
};

// What Current() returned, kept when it changed; the time is taken under the lock, so acts
// stay in time order.
inline void RecordAct(SimAgent& a, const Acting& acting) {
  std::lock_guard lock(*a.acts_mu);
  if (a.acts.empty() || a.acts.back().seq != acting.seq || a.acts.back().state != acting.state ||
      a.acts.back().budget_w != acting.job_budget_w) {
    a.acts.push_back({NowS(), acting.seq, acting.job_budget_w, acting.state});
  }
}

// ---- A Store that logs every call (so the bench's own load on etcd is known exactly) ----

struct CallRecord {
  enum Kind : uint8_t { kGet, kPut, kDelete, kTxn, kLeaseGrant, kKeepAlive, kRevoke, kWatch };
  double t_s = 0;
  float latency_s = 0;
  Kind kind = kGet;
  bool ok = true;
};

// Forwards every call (coord/forwarding_store.h) and times the worker's: not thread-safe for
// those (one thread, its worker, calls them); the members' watch threads' Follows are counted,
// not timed. A TxnEach is recorded as one transaction.
class RecordingStore final : public coord::ForwardingStore {
 public:
  explicit RecordingStore(coord::Store& inner) : ForwardingStore(&inner) {}

  const std::vector<CallRecord>& calls() const { return calls_; }
  uint64_t follows() const { return follows_.load(); }

 protected:
  void Begin(coord::StoreCall call, size_t) override {
    if (call == coord::StoreCall::kFollow) {
      follows_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    begun_s_ = NowS();
  }
  void End(coord::StoreCall call, bool ok) override {
    const std::optional<CallRecord::Kind> kind = KindOf(call);
    if (!kind) return;
    calls_.push_back({begun_s_, static_cast<float>(NowS() - begun_s_), *kind, ok});
  }

 private:
  static std::optional<CallRecord::Kind> KindOf(coord::StoreCall call) {
    switch (call) {
      case coord::StoreCall::kGet:
        return CallRecord::kGet;
      case coord::StoreCall::kPut:
        return CallRecord::kPut;
      case coord::StoreCall::kDelete:
        return CallRecord::kDelete;
      case coord::StoreCall::kTxn:
      case coord::StoreCall::kTxnEach:
        return CallRecord::kTxn;
      case coord::StoreCall::kLeaseGrant:
        return CallRecord::kLeaseGrant;
      case coord::StoreCall::kLeaseKeepAlive:
        return CallRecord::kKeepAlive;
      case coord::StoreCall::kLeaseRevoke:
        return CallRecord::kRevoke;
      case coord::StoreCall::kWatch:
        return CallRecord::kWatch;
      case coord::StoreCall::kFollow:
      case coord::StoreCall::kCompact:
        return std::nullopt;
    }
    return std::nullopt;
  }
  std::vector<CallRecord> calls_;
  double begun_s_ = 0.0;
  std::atomic<uint64_t> follows_{0};
};

// One connection's share of the members, stepped every step_s on the steady clock.
struct Worker {
  struct Round {
    double t_s = 0;  // when it started
    double took_s = 0;
    int members = 0;
    int skipped = 0;  // ticks it overran: skipped, not caught up
  };
  std::unique_ptr<etcd::EtcdStore> etcd;
  std::unique_ptr<RecordingStore> store;
  std::vector<size_t> agents;
  std::vector<Round> rounds;
  std::atomic<int> granted{0};
  std::atomic<int> registered{0};
  std::thread thread;
};

inline void RunWorker(Worker& w, std::vector<SimAgent>& agents, double first_tick_s, double step_s,
                      const std::atomic<bool>& stop) {
  for (double tick_s = first_tick_s; !stop.load(std::memory_order_relaxed);) {
    SleepUntilS(tick_s);
    const double start_s = NowS();
    int granted = 0, registered = 0;
    for (const size_t i : w.agents) {
      SimAgent& a = agents[i];
      a.member->Step();
      const Acting acting = a.member->Current();
      const double t_s = NowS();
      RecordAct(a, acting);
      if (acting.state == Acting::State::kGranted) ++granted;
      if (a.member->status().registered) ++registered;
      // A synthetic job: a little under what it may draw, tokens/s concave in power.
      const double cap_w = std::min(acting.job_budget_w, a.config.nameplate_w);
      const double power_w = cap_w * (0.93 + 0.05 * std::sin(0.3 * t_s + a.phase_rad));
      a.member->Observe(t_s, power_w, "train", 40.0 * std::pow(power_w, 0.7));
    }
    w.granted.store(granted, std::memory_order_relaxed);
    w.registered.store(registered, std::memory_order_relaxed);
    const double end_s = NowS();
    tick_s += step_s;
    const double skipped = tick_s < end_s ? std::ceil((end_s - tick_s) / step_s) : 0.0;
    tick_s += skipped * step_s;
    w.rounds.push_back(
        {start_s, end_s - start_s, static_cast<int>(w.agents.size()), static_cast<int>(skipped)});
  }
}

}  // namespace headroom::bench
