// Lease renewals against a real etcd (issue 55, item 2; EtcdKeepAlive in etcd/etcd_store.h):
// 1,000 leases renewed once each through the JSON gateway (one POST, one gRPC call
// that etcd starts, per renewal) and on one long-lived gRPC stream (EtcdStore's kGrpcStream),
// from 1 thread and from 8 threads sharing one store (the bench's and a node's many members).
// Beside the wall time per renewal, what etcd itself spent, from its /metrics and /proc:
//   etcd_cpu_ms_per_1k   etcd's utime+stime per 1,000 renewals
//   calls_per_1k         grpc_server_started_total{grpc_method="LeaseKeepAlive"} per 1,000
//   msgs_per_1k          grpc_server_msg_received_total{grpc_method="LeaseKeepAlive"} per 1,000
// One etcd (tests/support/etcd_cluster.h), started before the benchmarks, killed at the end.
//   ninja -C build headroom_etcd_bench && build/bin/headroom_etcd_bench --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "etcd/etcd_store.h"
#include "tests/support/etcd_cluster.h"

namespace headroom::bench {
namespace {

constexpr int kLeases = 1000;  // each benchmark renews each of them once
constexpr int64_t kTtlS = 60;  // none expires during a run

std::optional<etcd_test::EtcdCluster>& Etcd() {
  static std::optional<etcd_test::EtcdCluster> etcd;
  return etcd;
}
pid_t etcd_pid = 0;
std::map<etcd::EtcdKeepAlive, std::unique_ptr<etcd::EtcdStore>> stores;
std::vector<coord::LeaseId> leases;

// utime + stime of a process, s (0 when it cannot be read).
double ProcCpuS(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The sum of a counter of etcd's /metrics over its series for the LeaseKeepAlive method.
double LeaseKeepAliveMetric(const std::string& metrics, std::string_view name) {
  double sum = 0;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with(name) || line.size() <= name.size() || line[name.size()] != '{' ||
        line.find("grpc_method=\"LeaseKeepAlive\"") == std::string::npos) {
      continue;
    }
    sum += std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr);
  }
  return sum;
}

struct EtcdSnapshot {
  double cpu_s = 0, calls = 0, msgs = 0;
  static EtcdSnapshot Take() {
    const std::optional<etcd_test::EtcdCluster::Reply> r = Etcd()->Post(0, "/metrics", "");
    const std::string body = r ? r->body : "";
    return {ProcCpuS(etcd_pid), LeaseKeepAliveMetric(body, "grpc_server_started_total"),
            LeaseKeepAliveMetric(body, "grpc_server_msg_received_total")};
  }
};

// Each thread renews its share of the 1,000 leases, once each.
void BM_LeaseKeepAlive(benchmark::State& state, etcd::EtcdKeepAlive keepalive) {
  etcd::EtcdStore& store = *stores.at(keepalive);
  const int threads = state.threads();
  const int per_thread = kLeases / threads;
  const int first = state.thread_index() * per_thread;
  EtcdSnapshot before;
  if (state.thread_index() == 0) before = EtcdSnapshot::Take();
  int i = 0;
  for (auto _ : state) {
    Result<int64_t> ttl_s = store.LeaseKeepAlive(leases[first + i % per_thread]);
    if (!ttl_s.ok()) {
      state.SkipWithError(ttl_s.error().message().c_str());
      break;
    }
    ++i;
  }
  if (state.thread_index() != 0) return;
  const EtcdSnapshot after = EtcdSnapshot::Take();
  const double per_1k = 1000.0 / static_cast<double>(kLeases);
  state.counters["etcd_cpu_ms_per_1k"] = 1e3 * (after.cpu_s - before.cpu_s) * per_1k;
  state.counters["calls_per_1k"] = (after.calls - before.calls) * per_1k;
  state.counters["msgs_per_1k"] = (after.msgs - before.msgs) * per_1k;
}

void Register() {
  for (const auto& [name, keepalive] : {std::pair{"http", etcd::EtcdKeepAlive::kHttpPost},
                                        std::pair{"grpc", etcd::EtcdKeepAlive::kGrpcStream}}) {
    for (int threads : {1, 8}) {
      benchmark::RegisterBenchmark(fmt::format("BM_LeaseKeepAlive/{}", name).c_str(),
                                   BM_LeaseKeepAlive, keepalive)
          ->Threads(threads)
          ->Iterations(kLeases / threads)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

// etcd, one store of each kind (the stream opened by one renewal) and the leases.
bool Start() {
  std::string why;
  Etcd() = etcd_test::EtcdCluster::Start(1, &why);
  if (!Etcd()) {
    std::fprintf(stderr, "etcd_benchmark: cannot start etcd: %s\n", why.c_str());
    return false;
  }
  etcd_pid = Etcd()->pid(0);
  for (etcd::EtcdKeepAlive k : {etcd::EtcdKeepAlive::kHttpPost, etcd::EtcdKeepAlive::kGrpcStream}) {
    auto store = etcd::EtcdStore::Open(Etcd()->endpoint(0), 2.0, {}, {}, k);
    if (!store.ok()) {
      std::fprintf(stderr, "etcd_benchmark: %s\n", store.error().message().c_str());
      return false;
    }
    stores[k] = std::move(*store);
  }
  for (int i = 0; i < kLeases; ++i) {
    Result<coord::LeaseId> lease = stores.begin()->second->LeaseGrant(kTtlS);
    if (!lease.ok()) {
      std::fprintf(stderr, "etcd_benchmark: %s\n", lease.error().message().c_str());
      return false;
    }
    leases.push_back(*lease);
  }
  for (auto& [k, store] : stores) {
    if (!store->LeaseKeepAlive(leases[0]).ok()) return false;
  }
  return true;
}

}  // namespace
}  // namespace headroom::bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (!headroom::etcd_test::EtcdCluster::Available()) {
    std::fprintf(stderr, "etcd_benchmark: no %s\n", headroom::etcd_test::kEtcdBinary);
    return 77;
  }
  if (!headroom::bench::Start()) return 1;
  benchmark::AddCustomContext("etcd", "one member, /usr/bin/etcd, loopback");
  headroom::bench::Register();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  headroom::bench::stores.clear();
  headroom::bench::Etcd().reset();
  return 0;
}
