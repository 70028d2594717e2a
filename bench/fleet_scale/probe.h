// headroom_fleet_scale's own read of the site, timed part by part (bench/fleet_scale.cc reads top
// to bottom; this is one part).
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
#include "bench/fleet_scale/http.h"
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

// ---- The bench's own read of the site, as the leader reads it, timed part by part ----

struct Probe {
  double t_s = 0;
  double raw_range_s = 0;      // POST /v3/kv/range of the site's prefix: etcd and the transfer
  double store_get_s = 0;      // EtcdStore::Get of it: the same, and base64 + JSON decoding
  double values_s = 0;         // the values parsed as the leader parses them
  double plan_s = 0;           // coord::Plan on them
  double store_get_cpu_s = 0;  // this thread's CPU in the EtcdStore::Get
  double values_cpu_s = 0;
  double plan_cpu_s = 0;
  size_t keys = 0;
  size_t bytes = 0;  // of the gateway's answer
};

inline std::optional<Probe> ProbeSite(int etcd_port, coord::Store& store, const coord::Keys& keys) {
  Probe p;
  p.t_s = NowS();
  const std::string body = etcd::RangeJson(keys.root, /*prefix=*/true).dump();
  double t0 = NowS();
  auto raw = Client(etcd_port, 10.0)->Post("/v3/kv/range", body, "application/json");
  p.raw_range_s = NowS() - t0;
  if (!raw || raw->status != 200) return std::nullopt;
  p.bytes = raw->body.size();
  t0 = NowS();
  double c0 = ThreadCpuS();
  auto snap = store.Get(keys.root, true);
  p.store_get_s = NowS() - t0;
  p.store_get_cpu_s = ThreadCpuS() - c0;
  if (!snap) return std::nullopt;
  p.keys = snap->kvs.size();
  t0 = NowS();
  c0 = ThreadCpuS();
  coord::PlanInput in;
  std::optional<coord::Ledger> ledger;
  int64_t term = 0;
  for (const coord::KeyValue& kv : snap->kvs) {
    if (kv.key == keys.ledger()) {
      if (auto l = coord::LedgerFromJson(kv.value, kv.key)) ledger = std::move(*l);
    } else if (kv.key == keys.leader()) {
      term = kv.create_revision;
    } else if (kv.key.starts_with(keys.members())) {
      if (auto m = coord::MemberFromJson(kv.value, kv.key)) {
        in.registered_at[m->job] = kv.create_revision;
        in.members[m->job] = std::move(*m);
      }
    } else if (kv.key.starts_with(keys.acks())) {
      if (auto a = coord::AckFromJson(kv.value, kv.key)) in.acks[a->job] = std::move(*a);
    } else if (kv.key.starts_with(keys.grants())) {
      if (auto g = coord::GrantFromJson(kv.value, kv.key)) in.grants[g->job] = std::move(*g);
    }
  }
  p.values_s = NowS() - t0;
  p.values_cpu_s = ThreadCpuS() - c0;
  if (ledger) {
    t0 = NowS();
    c0 = ThreadCpuS();
    const coord::PlanOutput plan = coord::Plan(*ledger, in, term);
    p.plan_s = NowS() - t0;
    p.plan_cpu_s = ThreadCpuS() - c0;
    (void)plan;
  }
  return p;
}

}  // namespace headroom::bench
