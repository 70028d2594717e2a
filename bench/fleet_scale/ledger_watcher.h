// headroom_fleet_scale's watch of the ledger (bench/fleet_scale.cc reads top to bottom; this is one
// part).
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

// ---- The ledger, watched ----

struct LedgerSeen {
  double t_s = 0;  // when the watch delivered it
  int64_t revision = 0;
  coord::Ledger ledger;
};

class LedgerWatcher {
 public:
  LedgerWatcher(std::unique_ptr<etcd::EtcdStore> store, std::string key)
      : store_(std::move(store)), key_(std::move(key)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~LedgerWatcher() { Stop(); }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  std::vector<LedgerSeen> seen() const {
    MutexLock lock(mu_);
    return seen_;
  }
  uint64_t errors() const { return errors_.load(); }

 private:
  void Add(double t_s, const coord::KeyValue& kv) {
    auto l = coord::LedgerFromJson(kv.value, kv.key);
    if (!l) {
      errors_.fetch_add(1);
      return;
    }
    MutexLock lock(mu_);
    seen_.push_back({t_s, kv.mod_revision, std::move(*l)});
  }
  void Run() {
    int64_t revision = 0;
    while (!stop_.load() && revision == 0) {
      auto got = store_->Get(key_, false);
      if (!got) {
        errors_.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      revision = got->revision;
      if (!got->kvs.empty()) Add(NowS(), got->kvs[0]);
    }
    while (!stop_.load()) {
      auto w = store_->Watch(key_, false, revision, 0.5);
      const double t_s = NowS();
      if (!w) {
        errors_.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      if (w->compacted) {
        revision = 0;
        auto got = store_->Get(key_, false);
        if (got) revision = got->revision;
        continue;
      }
      for (const coord::WatchEvent& e : w->events) {
        if (e.type == coord::WatchEvent::Type::kPut) Add(t_s, e.kv);
      }
      revision = std::max(revision, w->revision);
    }
  }

  std::unique_ptr<etcd::EtcdStore> store_;
  const std::string key_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> errors_{0};
  mutable Mutex mu_;
  std::vector<LedgerSeen> seen_ GUARDED_BY(mu_);
};

}  // namespace headroom::bench
