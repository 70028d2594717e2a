// headroom_history_bench: the coordinator's API while readers pull a long history (issue 53:
// "GET /v1/status and POST /v1/site-budget p99 <= 100 ms with 32 readers pulling a one-hour,
// 1,000-job history; RSS bounded and measured"). `make bench-hostile-coordinator` runs it.
//
//   headroom_history_bench [--jobs 1000] [--hour-s 3600] [--readers 32] [--json FILE]
//
// Reads top to bottom: a child process is the replica — coord_server::CoordinatorHost over the
// in-memory store (the daemon's composition without etcd, so the numbers are the server's and
// the history's, not etcd's), `--jobs` members registered and acknowledged as agents would, a
// history of `--hour-s` periods filled by real leader periods on a fake clock, then served by
// coord_server::CoordinatorServer (the daemon's transport and limits) while its loop steps every
// second on the wall clock -> this process measures, with a token as a site would have:
//   quiet: a new client's GET /v1/status and POST /v1/site-budget (each a new connection, 2 s
//          timeout; a timeout counts as 2,000 ms), 300 of each at 10 ms pacing;
//   loaded: the same while `--readers` clients each page through the whole history (GET
//          /v1/history, then ?after=next_after while `more`) and start again, without pause;
// and the replica's memory (VmRSS) before the history, after it, and its peak (VmHWM) while
// loaded. Prints a table; --json FILE writes the numbers. Exit 1 when a target is missed.
#include <fmt/format.h>
#include <httplib.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "coord/coordinator.h"
#include "coord/layout.h"
#include "coord/member.h"
#include "coord/memory_store.h"
#include "coord_server/coordinator_server.h"

// `make bench-history`'s baseline (HISTORY_BASELINE_COMMIT) predates the namespaces that follow
// folders (issue 54): there the coordinator's server is in coord::.
#ifdef HEADROOM_HISTORY_BASELINE
namespace headroom {
namespace coord_server = coord;
}  // namespace headroom
#endif

namespace headroom::bench {
namespace {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

constexpr const char* kToken = "bench-history-token";
constexpr double kTimeoutS = 2.0;
constexpr int kProbes = 300;
constexpr auto kPacing = std::chrono::milliseconds(10);
constexpr double kTargetP99Ms = 100.0;
constexpr double kUnixBaseS = 1.8e9;

struct Args {
  int jobs = 1000;
  int hour_s = 3600;
  int readers = 32;
  std::string json_path;
};

double FloorW(int i) { return 100.0 + 200.0 * static_cast<double>((i * 37) % 101) / 100.0; }
double NameplateW(int i) { return 400.0 + 600.0 * static_cast<double>((i * 53) % 97) / 96.0; }

// MB (2^20 bytes) of the process's VmRSS or VmHWM (/proc/PID/status); 0 when unreadable.
double StatusMb(pid_t pid, const std::string& field) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) / 1024.0;
  }
  return 0.0;
}

// ---- The replica (the child) ----

// Acknowledges every grant newer than its ack, as an agent acting on it would.
void AckGrants(coord::MemoryStore& store, const coord::Keys& keys,
               const std::vector<coord::LeaseId>& leases) {
  auto grants = store.Get(keys.grants(), true);
  if (!grants) return;
  for (const coord::KeyValue& kv : grants->kvs) {
    auto g = coord::GrantFromJson(kv.value, kv.key);
    if (!g) continue;
    const int i = std::stoi(g->job.substr(4));
    coord::Ack a{g->job, g->term, g->seq, g->lease, g->job_budget_w};
    (void)store.Put(keys.ack(g->job), coord::ToJson(a), leases[static_cast<size_t>(i)]);
  }
}

// Fills the history, serves, writes "PORT RSS_BEFORE_MB RSS_AFTER_MB\n" to `ready_fd`, and
// steps every second until killed.
[[noreturn]] void Replica(const Args& args, int ready_fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  auto t = std::make_shared<std::atomic<double>>(0.0);
  const auto now = [t] { return t->load(); };
  coord::MemoryStore store(now, 1000);
  const coord::Keys keys("site");
  std::vector<coord::LeaseId> leases;
  double demand_w = 0.0;
  for (int i = 0; i < args.jobs; ++i) {
    coord::Member m;
    m.job = fmt::format("job-{:04d}", i);
    m.gpus = 8;
    m.nameplate_w = NameplateW(i);
    m.floor_w = FloorW(i);
    m.demand_w = m.nameplate_w;
    m.power_w = 0.9 * m.nameplate_w;
    m.phase = "train";
    m.value_tokens_per_j = 1.5;
    m.budget_w = m.floor_w;
    m.lease = *store.LeaseGrant(10 * 86400);
    leases.push_back(m.lease);
    demand_w += m.demand_w;
    (void)store.Put(keys.member(m.job), coord::ToJson(m), m.lease);
  }
  coord::CoordinatorConfig config;
  config.site = "site";
  config.site_budget_w = 0.8 * demand_w;
  config.reserve_w = 1000.0;
  config.id = "bench";
  coord_server::CoordinatorApiConfig api;
  api.access.token = kToken;
  coord_server::CoordinatorServer server(api);
  if (!server.Bind("127.0.0.1", 0)) _exit(2);
  config.listen = fmt::format("127.0.0.1:{}", server.port());
  coord_server::CoordinatorHost host(store, config, now, [](const std::string&) {});
  const double before_mb = StatusMb(getpid(), "VmRSS");
  host.KeepHistory([t] { return kUnixBaseS + t->load(); });
  for (int i = 0; i < args.hour_s; ++i) {
    *t = t->load() + 1.0;
    host.Step();
    if (i < 60) AckGrants(store, keys, leases);  // until steady: every job admitted
    if (i % 600 == 0) fmt::print(stderr, "  history: {} of {} periods\n", i, args.hour_s);
  }
  const double after_mb = StatusMb(getpid(), "VmRSS");
  server.Serve(host);
  const std::string ready = fmt::format("{} {} {}\n", server.port(), before_mb, after_mb);
  if (write(ready_fd, ready.data(), ready.size()) < 0) _exit(2);
  close(ready_fd);
  // The daemon's loop: a period a second on the wall clock.
  auto last = SteadyClock::now();
  for (;;) {
    std::this_thread::sleep_until(last + std::chrono::seconds(1));
    const auto at = SteadyClock::now();
    *t = t->load() + std::chrono::duration<double>(at - last).count();
    last = at;
    host.Step();
  }
}

// ---- The measuring (the parent) ----

struct Latency {
  std::vector<double> ms;
  int failures = 0;
  json Summary() const {
    std::vector<double> s = ms;
    std::sort(s.begin(), s.end());
    const auto q = [&](double p) {
      return s.empty()
                 ? 0.0
                 : s[std::min(
                       s.size() - 1,
                       static_cast<size_t>(std::ceil(p * static_cast<double>(s.size()))) - 1)];
    };
    return {{"requests", s.size()},
            {"p50_ms", q(0.5)},
            {"p99_ms", q(0.99)},
            {"max_ms", s.empty() ? 0.0 : s.back()},
            {"failures", failures}};
  }
};

// A new client's request; its latency in ms, or the timeout counted as a failure.
void Probe(int port, bool post, int i, Latency* out) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(std::chrono::milliseconds(static_cast<int>(kTimeoutS * 1000)));
  c.set_read_timeout(std::chrono::milliseconds(static_cast<int>(kTimeoutS * 1000)));
  c.set_write_timeout(std::chrono::milliseconds(static_cast<int>(kTimeoutS * 1000)));
  const httplib::Headers auth{{"Authorization", std::string("Bearer ") + kToken}};
  const auto start = SteadyClock::now();
  // Alternately 1 W lower and back: a target that changes, as a demand-response signal's.
  const std::string body = fmt::format("{{\"reserve_w\": {}}}", 1000 + (i % 2));
  auto res =
      post ? c.Post("/v1/site-budget", auth, body, "application/json") : c.Get("/v1/status", auth);
  const double ms = std::chrono::duration<double, std::milli>(SteadyClock::now() - start).count();
  const bool ok = res && (post ? res->status == 202 : res->status == 200);
  if (!ok) ++out->failures;
  out->ms.push_back(ok ? ms : kTimeoutS * 1000.0);
}

json Measure(int port) {
  Latency status, budget;
  for (int i = 0; i < kProbes; ++i) {
    Probe(port, false, i, &status);
    std::this_thread::sleep_for(kPacing);
    Probe(port, true, i, &budget);
    std::this_thread::sleep_for(kPacing);
  }
  return {{"status", status.Summary()}, {"site_budget", budget.Summary()}};
}

struct Readers {
  std::atomic<bool> stop{false};
  std::atomic<long> pages{0}, walks{0}, points{0}, busy{0}, errors{0};
  std::atomic<long long> bytes{0};
  std::vector<std::thread> threads;

  void Start(int port, int n) {
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([this, port] {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout(std::chrono::seconds(30));
        const httplib::Headers auth{{"Authorization", std::string("Bearer ") + kToken}};
        std::string after;
        while (!stop) {
          auto res = c.Get(("/v1/history" + after).c_str(), auth);
          if (!res) {
            ++errors;
            continue;
          }
          if (res->status == 503) {
            ++busy;
            continue;
          }
          ++pages;
          bytes += static_cast<long long>(res->body.size());
          const json h = json::parse(res->body, nullptr, false);
          if (h.is_discarded() || res->status != 200) {
            ++errors;
            continue;
          }
          points += static_cast<long>(h["points"].size());
          // An answer without `more` (the history before issue 53: the newest that fit, whole)
          // is read again from the start.
          if (h.value("more", false)) {
            after = "?after=" + h["next_after"].dump();
          } else {
            after.clear();
            ++walks;
          }
        }
      });
    }
  }
  void Stop() {
    stop = true;
    for (auto& th : threads) th.join();
  }
};

int Run(const Args& args) {
  int fds[2];
  if (pipe(fds) != 0) return 2;
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    Replica(args, fds[1]);
  }
  close(fds[1]);
  fmt::print(stderr, "filling a {}-period history of {} jobs (real leader periods) ...\n",
             args.hour_s, args.jobs);
  char buf[128] = {};
  const ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
  close(fds[0]);
  int port = 0;
  double before_mb = 0.0, after_mb = 0.0;
  if (n <= 0 || std::sscanf(buf, "%d %lf %lf", &port, &before_mb, &after_mb) != 3) {
    fmt::print(stderr, "headroom_history_bench: the replica did not start\n");
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    return 2;
  }
  fmt::print(stderr, "measuring quiet ...\n");
  const json quiet = Measure(port);
  fmt::print(stderr, "measuring with {} readers pulling the history ...\n", args.readers);
  Readers readers;
  const auto start = SteadyClock::now();
  readers.Start(port, args.readers);
  const json loaded = Measure(port);
  const double loaded_s = std::chrono::duration<double>(SteadyClock::now() - start).count();
  const double rss_loaded_mb = StatusMb(child, "VmRSS");
  const double peak_mb = StatusMb(child, "VmHWM");
  readers.Stop();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);

  json out{{"jobs", args.jobs},
           {"history_periods", args.hour_s},
           {"readers", args.readers},
           {"quiet", quiet},
           {"loaded", loaded},
           {"history",
            {{"pages", readers.pages.load()},
             {"walks", readers.walks.load()},
             {"points", readers.points.load()},
             {"mb_per_s", static_cast<double>(readers.bytes.load()) / 1e6 / loaded_s},
             {"busy_503", readers.busy.load()},
             {"errors", readers.errors.load()}}},
           {"rss_mb",
            {{"before_history", before_mb},
             {"after_history", after_mb},
             {"loaded", rss_loaded_mb},
             {"peak", peak_mb}}}};
  fmt::print(
      "\nThe coordinator with a {}-period history of {} jobs; a new client each request, "
      "{} of each at {} ms pacing, {:.0f} s timeout\n",
      args.hour_s, args.jobs, kProbes, kPacing.count() * 2, kTimeoutS);
  fmt::print("{:<34} {:>26}   {:>26}\n", "", "quiet: p50 / p99 / max ms",
             fmt::format("{} readers: p50 / p99 / max ms", args.readers));
  bool met = true;
  for (const auto& [key, name] :
       {std::pair{"status", "GET /v1/status"}, std::pair{"site_budget", "POST /v1/site-budget"}}) {
    const json& q = quiet[key];
    const json& l = loaded[key];
    fmt::print(
        "{:<34} {:>8.2f} / {:>6.2f} / {:>6.2f}   {:>8.2f} / {:>6.2f} / {:>6.2f}, {} failed\n", name,
        q["p50_ms"].get<double>(), q["p99_ms"].get<double>(), q["max_ms"].get<double>(),
        l["p50_ms"].get<double>(), l["p99_ms"].get<double>(), l["max_ms"].get<double>(),
        l["failures"].get<int>());
    met = met && l["p99_ms"].get<double>() <= kTargetP99Ms && l["failures"].get<int>() == 0;
  }
  fmt::print("history served: {} pages ({} whole hours), {:.1f} MB/s, {} answered busy (503)\n",
             readers.pages.load(), readers.walks.load(), out["history"]["mb_per_s"].get<double>(),
             readers.busy.load());
  fmt::print(
      "replica RSS: {:.0f} MB before the history, {:.0f} MB with it, {:.0f} MB loaded, "
      "peak {:.0f} MB\n",
      before_mb, after_mb, rss_loaded_mb, peak_mb);
  fmt::print("target (p99 <= {:.0f} ms under the readers, none failed): {}\n", kTargetP99Ms,
             met ? "met" : "MISSED");
  out["target_met"] = met;
  if (!args.json_path.empty()) {
    std::ofstream f(args.json_path);
    f << out.dump(1) << "\n";
  }
  return met ? 0 : 1;
}

}  // namespace
}  // namespace headroom::bench

int main(int argc, char** argv) {
  headroom::bench::Args args;
  CLI::App app{"The coordinator's API while readers pull a long history (issue 53)"};
  app.add_option("--jobs", args.jobs, "Jobs in the site")->check(CLI::Range(1, 10000));
  app.add_option("--hour-s", args.hour_s, "Periods of history (1 s each)")
      ->check(CLI::Range(1, 36000));
  app.add_option("--readers", args.readers, "Clients pulling the history")
      ->check(CLI::Range(0, 256));
  app.add_option("--json", args.json_path, "Write the numbers here");
  CLI11_PARSE(app, argc, argv);
  signal(SIGPIPE, SIG_IGN);
  return headroom::bench::Run(args);
}
