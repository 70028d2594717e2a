// headroom_fleet_scale: one site at scale (docs/PERFORMANCE.md, "A site at scale"). One real
// `headroom coordinator` process and N light simulated agents on one etcd of its own:
//
//   headroom_fleet_scale --headroom build/bin/headroom --agents 1000 --duration-s 60 [--json F]
//
// Reads top to bottom: options -> the site's agents (deterministic floors and nameplates) ->
// etcd (tests/coord/etcd_cluster.h: a single member in a temporary directory, killed at the end
// pass or fail) and a pass-through proxy in front of it for the coordinator -> the agents
// (coord::FleetMember over 32 coord::EtcdStore connections, one thread each, every member doing
// what an agent does every 0.25 s: Step, Current, Observe; and, as each agent has, a thread per
// member watching its grant on a stream of its own, unless --poll), all registered -> the
// coordinator (a child process on the proxy, killed by PID at the end) -> a steady phase with a
// site budget change, alternately lower and higher, every 10 s -> what it measured:
//   (a) whether the coordinator holds its period: its reads of the whole site (one a period) as
//       the proxy saw them, how far apart and how long each took; the ledger's writes (watched)
//       and the time between consecutive ones;
//   (b) grant round trip: from each POST /v1/site-budget to each member's first Current() on a
//       grant with a new sequence (at its watch's event, or its next step with --poll), and to
//       the full reallocation (every member acting on the ledger's latest sequence for it);
//   (c) etcd's requests and transactions per second, from its /metrics;
//   (d) the coordinator's, etcd's and this process's CPU, the coordinator's and etcd's memory;
//   and the invariant, checked independently of the coordinator: the sum over members of what
//   Current() returned <= the site budget in force - reserve, at every change of any member.
// Exit status: 0, 1 when the invariant was broken, 2 when the site could not be set up.
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
#include "etcd/etcd_store.h"
#include "etcd/etcd_wire.h"
#include "coord/forwarding_store.h"
#include "coord/layout.h"
#include "coord/member.h"
#include "coord/memory_store.h"
#include "coord/plan.h"
#include "coord/store.h"
#include "tests/coord/etcd_cluster.h"

namespace headroom::bench {
namespace {

using coord::Acting;
using json = nlohmann::ordered_json;

// ---- Options ----

struct Options {
  std::string headroom = "build/bin/headroom";  // the binary whose `coordinator` is measured
  int agents = 1000;              // simulated agents (coord::FleetMember), in this process
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
  // Members watch their grant (a stream each, as agents do) and read it once a second; with
  // --poll, they read it at every step instead (the agents before issue 32's item 7).
  bool watch = true;
  uint64_t seed = 1;      // floors and nameplates
  std::string json_path;  // also write the results here
};

inline constexpr const char* kSite = "scale";
inline constexpr double kPeriodS = 1.0;
inline constexpr int64_t kLeaseTtlS = 3;
inline constexpr double kFloorMinW = 100.0, kFloorMaxW = 300.0;
inline constexpr double kNameplateMinW = 400.0, kNameplateMaxW = 1000.0;
inline constexpr double kStartWaitS = 20.0;          // the coordinator's port, then its leadership
inline constexpr double kChainGapMaxS = 3.0;         // ledger writes closer than this: one chain
inline constexpr double kInvariantTolW = 1e-6;       // per member: rounding
inline constexpr double kGrantReadWithWatchS = 1.0;  // as the agent (cli/agent_command.cc)
inline constexpr double kGrantQuietS = 30.0;         // as the agent

// ---- Clocks, /proc ----

using SteadyClock = std::chrono::steady_clock;
const SteadyClock::time_point kEpoch = SteadyClock::now();

double NowS() { return std::chrono::duration<double>(SteadyClock::now() - kEpoch).count(); }

// This thread's CPU time.
double ThreadCpuS() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void SleepUntilS(double t_s) {
  const double wait_s = t_s - NowS();
  if (wait_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait_s));
}

// utime + stime of a process (seconds); nullopt when it is gone.
std::optional<double> ProcCpuS(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  // Fields from 3 (state) on: utime is 14, stime 15.
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// A child of this process running `comm` (etcd's, which EtcdCluster does not expose); 0 if none.
pid_t ChildNamed(std::string_view comm) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t open = text.find('('), close = text.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close + 4 > text.size())
      continue;
    std::istringstream rest(text.substr(close + 2));
    std::string state;
    long ppid = 0;
    rest >> state >> ppid;
    if (ppid == getpid() && text.substr(open + 1, close - open - 1) == comm) {
      return static_cast<pid_t>(std::stol(name));
    }
  }
  return 0;
}

// VmRSS and VmHWM of a process, MiB.
std::pair<double, double> ProcMemoryMiB(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  double rss_kib = 0, hwm_kib = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("VmRSS:")) rss_kib = std::stod(line.substr(6));
    if (line.starts_with("VmHWM:")) hwm_kib = std::stod(line.substr(6));
  }
  return {rss_kib / 1024.0, hwm_kib / 1024.0};
}

// The machine's busy and total CPU seconds (every core), from /proc/stat.
std::pair<double, double> MachineCpuS() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  in >> cpu;
  double total = 0, idle = 0, v = 0;
  for (int i = 0; i < 8 && in >> v; ++i) {
    total += v;
    if (i == 3 || i == 4) idle += v;  // idle, iowait
  }
  const auto tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  return {(total - idle) / tick, total / tick};
}

// Nearest-rank quantile; NaN when empty.
double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  const size_t rank =
      static_cast<size_t>(std::max(1.0, std::ceil(q * static_cast<double>(v.size()))));
  const auto nth = v.begin() + static_cast<std::ptrdiff_t>(std::min(rank, v.size()) - 1);
  std::nth_element(v.begin(), nth, v.end());
  return *nth;
}

json Num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// ---- The site's agents ----

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
double Uniform(uint64_t seed, uint64_t i, uint64_t k) {
  return static_cast<double>(SplitMix64(seed * 0x100000001b3ULL + i * 16 + k) >> 11) * 0x1p-53;
}

coord::MemberConfig AgentConfig(const Options& o, int i) {
  coord::MemberConfig c;
  c.site = kSite;
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
  std::unique_ptr<coord::FleetMember> member;
  double phase_rad = 0;
  // Written by its worker and its watch thread, in time order; read after both are joined.
  std::unique_ptr<std::mutex> acts_mu = std::make_unique<std::mutex>();
  std::vector<ActRecord> acts;
  std::thread watch;  // with Options::watch: WatchGrant, again and again
};

// What Current() returned, kept when it changed; the time is taken under the lock, so acts
// stay in time order.
void RecordAct(SimAgent& a, const Acting& acting) {
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
  std::unique_ptr<coord::EtcdStore> etcd;
  std::unique_ptr<RecordingStore> store;
  std::vector<size_t> agents;
  std::vector<Round> rounds;
  std::atomic<int> granted{0};
  std::atomic<int> registered{0};
  std::thread thread;
};

void RunWorker(Worker& w, std::vector<SimAgent>& agents, double first_tick_s, double step_s,
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

// ---- The ledger, watched ----

struct LedgerSeen {
  double t_s = 0;  // when the watch delivered it
  int64_t revision = 0;
  coord::Ledger ledger;
};

class LedgerWatcher {
 public:
  LedgerWatcher(std::unique_ptr<coord::EtcdStore> store, std::string key)
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

  std::unique_ptr<coord::EtcdStore> store_;
  const std::string key_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> errors_{0};
  mutable Mutex mu_;
  std::vector<LedgerSeen> seen_ GUARDED_BY(mu_);
};

// ---- Between the coordinator and etcd: a pass-through proxy that times its requests ----

// Forwards bytes both ways and notes, per request, its path, whether it reads a range of keys
// (a "range_end" in it: the leader's read of the site), when it was sent and when its answer's
// first and last bytes came. EtcdStore sends one request at a time on a connection and waits for
// the answer, so client bytes after answer bytes start the next request. Costs the coordinator
// one loopback hop per request.
class EtcdProxy {
 public:
  struct Request {
    double sent_s = 0;
    double first_byte_s = std::nan("");
    double last_byte_s = std::nan("");
    std::string path;
    bool range_of_keys = false;
    size_t answer_bytes = 0;
  };

  static std::unique_ptr<EtcdProxy> Start(int etcd_port, std::string* why) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(fd, 16) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      *why = fmt::format("proxy: {}", std::strerror(errno));
      if (fd >= 0) close(fd);
      return nullptr;
    }
    return std::unique_ptr<EtcdProxy>(new EtcdProxy(fd, ntohs(addr.sin_port), etcd_port));
  }
  ~EtcdProxy() {
    stop_.store(true);
    if (acceptor_.joinable()) acceptor_.join();
    for (std::thread& t : pumps_) t.join();
    close(listen_fd_);
  }

  int port() const { return port_; }
  std::vector<Request> requests() const {
    MutexLock lock(mu_);
    return requests_;
  }

 private:
  static constexpr int kPollMs = 100;

  EtcdProxy(int fd, int port, int etcd_port) : listen_fd_(fd), port_(port), etcd_port_(etcd_port) {
    acceptor_ = std::thread([this] { Accept(); });
  }

  void Accept() {
    while (!stop_.load()) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, kPollMs) <= 0) continue;
      const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      const int server = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(etcd_port_));
      if (server < 0 || connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        close(client);
        if (server >= 0) close(server);
        continue;
      }
      const int yes = 1;
      setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
      setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
      pumps_.emplace_back([this, client, server] { Pump(client, server); });
    }
  }

  static bool WriteAll(int fd, const char* data, size_t size) {
    while (size > 0) {
      const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      data += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  }

  void Pump(int client, int server) {
    std::vector<char> buffer(size_t{1} << 16);
    std::optional<size_t> current;  // the request being answered (index into requests_)
    bool answered = true;           // the next client bytes start a request
    while (!stop_.load()) {
      pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      if (poll(p, 2, kPollMs) <= 0) continue;
      if (p[0].revents != 0) {
        const ssize_t n = recv(client, buffer.data(), buffer.size(), 0);
        if (n <= 0) break;
        const double t_s = NowS();
        const std::string_view data(buffer.data(), static_cast<size_t>(n));
        {
          MutexLock lock(mu_);
          if (answered) {
            Request r;
            r.sent_s = t_s;
            const size_t space = data.find(' ');
            const size_t end = data.find(' ', space + 1);
            if (space != std::string_view::npos && end != std::string_view::npos)
              r.path = std::string(data.substr(space + 1, end - space - 1));
            current = requests_.size();
            requests_.push_back(std::move(r));
            answered = false;
          }
          if (data.find("range_end") != std::string_view::npos)
            requests_[*current].range_of_keys = true;
        }
        if (!WriteAll(server, data.data(), data.size())) break;
      }
      if (p[1].revents != 0) {
        const ssize_t n = recv(server, buffer.data(), buffer.size(), 0);
        if (n <= 0) break;
        const double t_s = NowS();
        if (current) {
          MutexLock lock(mu_);
          Request& r = requests_[*current];
          if (std::isnan(r.first_byte_s)) r.first_byte_s = t_s;
          r.last_byte_s = t_s;
          r.answer_bytes += static_cast<size_t>(n);
        }
        answered = true;
        if (!WriteAll(client, buffer.data(), static_cast<size_t>(n))) break;
      }
    }
    close(client);
    close(server);
  }

  const int listen_fd_;
  const int port_;
  const int etcd_port_;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> pumps_;  // the acceptor's
  mutable Mutex mu_;
  std::vector<Request> requests_ GUARDED_BY(mu_);
};

// ---- The coordinator, a child process ----

class CoordinatorProcess {
 public:
  struct Line {
    double t_s;
    std::string text;
  };

  // Starts `headroom coordinator` with its stdout and stderr into a pipe this process reads
  // (each line stamped on the steady clock, all kept in `log_path`).
  static std::unique_ptr<CoordinatorProcess> Start(const std::vector<std::string>& args,
                                                   const std::string& log_path, std::string* why) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      *why = fmt::format("pipe: {}", std::strerror(errno));
      return nullptr;
    }
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
      // Only async-signal-safe calls from here to exec.
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // no coordinator outlives a crashed bench
      if (getppid() != parent) _exit(127);
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigaction(SIGPIPE, &dfl, nullptr);  // as deployed, not as this process has it
      if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0) {
        for (int fd = 3; fd < 1024; ++fd) close(fd);
      }
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    if (pid < 0) {
      close(fds[0]);
      *why = fmt::format("fork: {}", std::strerror(errno));
      return nullptr;
    }
    return std::unique_ptr<CoordinatorProcess>(new CoordinatorProcess(pid, fds[0], log_path));
  }

  ~CoordinatorProcess() { Stop(); }

  pid_t pid() const { return pid_; }
  bool running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    return true;
  }
  // The port of its "listening on http://127.0.0.1:PORT/" line; 0 until then.
  int port() const { return port_.load(); }
  // Lines that mention the site budget, and the last lines (for messages).
  std::vector<Line> budget_lines() const {
    MutexLock lock(mu_);
    return budget_lines_;
  }
  std::string tail() const {
    MutexLock lock(mu_);
    std::string out;
    for (const std::string& l : tail_) out += "  " + l + "\n";
    return out;
  }
  uint64_t lines() const { return lines_.load(); }

  // SIGTERM (it resigns and stops), SIGKILL after 5 s; waits for it and for its pipe's end.
  void Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      for (int i = 0; i < 500 && waitpid(pid_, &status, WNOHANG) == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (waitpid(pid_, &status, WNOHANG) == 0) {
        kill(pid_, SIGKILL);
        while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
      }
      pid_ = -1;
    }
    if (reader_.joinable()) reader_.join();
  }

 private:
  CoordinatorProcess(pid_t pid, int fd, const std::string& log_path) : pid_(pid), fd_(fd) {
    reader_ = std::thread([this, log_path] { Read(log_path); });
  }

  void Read(const std::string& log_path) {
    std::ofstream log(log_path);
    std::string buffer;
    char chunk[65536];
    for (;;) {
      const ssize_t n = read(fd_, chunk, sizeof(chunk));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      const double t_s = NowS();
      buffer.append(chunk, static_cast<size_t>(n));
      size_t start = 0;
      for (size_t nl = buffer.find('\n'); nl != std::string::npos; nl = buffer.find('\n', start)) {
        Take(t_s, buffer.substr(start, nl - start), log);
        start = nl + 1;
      }
      buffer.erase(0, start);
    }
    close(fd_);
  }

  void Take(double t_s, std::string line, std::ofstream& log) {
    log << fmt::format("[{:.3f}] {}\n", t_s, line);
    lines_.fetch_add(1);
    constexpr std::string_view kListening = "listening on http://";
    if (const size_t at = line.find(kListening); at != std::string::npos) {
      const std::string address = line.substr(at + kListening.size());
      const size_t colon = address.rfind(':');
      if (colon != std::string::npos) port_.store(std::atoi(address.c_str() + colon + 1));
    }
    MutexLock lock(mu_);
    if (line.find("site budget") != std::string::npos) budget_lines_.push_back({t_s, line});
    tail_.push_back(std::move(line));
    if (tail_.size() > 20) tail_.erase(tail_.begin());
  }

  pid_t pid_;
  const int fd_;
  std::thread reader_;
  std::atomic<int> port_{0};
  std::atomic<uint64_t> lines_{0};
  mutable Mutex mu_;
  std::vector<Line> budget_lines_ GUARDED_BY(mu_);
  std::vector<std::string> tail_ GUARDED_BY(mu_);
};

// ---- HTTP: the coordinator's API, etcd's metrics ----

std::unique_ptr<httplib::Client> Client(int port, double timeout_s) {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
  const auto s = static_cast<time_t>(timeout_s);
  c->set_connection_timeout(s, 0);
  c->set_read_timeout(s, 0);
  c->set_write_timeout(s, 0);
  return c;
}

std::optional<std::string> HttpGet(int port, const std::string& path, double timeout_s = 5.0) {
  auto r = Client(port, timeout_s)->Get(path);
  if (!r || r->status != 200) return std::nullopt;
  return r->body;
}

int PortOf(const std::string& url) { return std::atoi(url.c_str() + url.rfind(':') + 1); }

// Unlabelled samples by name, and grpc_server_started_total summed by grpc_method
// ("grpc:Range"...).
std::map<std::string, double> ScrapeEtcd(int port) {
  std::map<std::string, double> out;
  const std::optional<std::string> text = HttpGet(port, "/metrics");
  if (!text) return out;
  std::istringstream in(*text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    const std::string name = line.substr(0, space);
    const double v = std::strtod(line.c_str() + space + 1, nullptr);
    if (name.find('{') == std::string::npos) {
      out[name] = v;
    } else if (name.starts_with("grpc_server_started_total{")) {
      constexpr std::string_view kMethod = "grpc_method=\"";
      const size_t at = name.find(kMethod);
      if (at == std::string::npos) continue;
      const size_t begin = at + kMethod.size();
      out["grpc:" + name.substr(begin, name.find('"', begin) - begin)] += v;
    }
  }
  return out;
}

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

std::optional<Probe> ProbeSite(int etcd_port, coord::Store& store, const coord::Keys& keys) {
  Probe p;
  p.t_s = NowS();
  const std::string body = coord::RangeJson(keys.root, /*prefix=*/true).dump();
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

// ---- The run ----

struct SiteBudgetChange {
  double t_s = 0;  // just before the POST
  double site_budget_w = 0;
  bool lower = false;
  int status = 0;  // the HTTP answer
};

int Run(const Options& o) {
  // The site's agents.
  std::vector<SimAgent> agents(static_cast<size_t>(o.agents));
  double floors_w = 0, demands_w = 0;
  for (int i = 0; i < o.agents; ++i) {
    SimAgent& a = agents[static_cast<size_t>(i)];
    a.config = AgentConfig(o, i);
    a.phase_rad = 6.283185307179586 * Uniform(o.seed, static_cast<uint64_t>(i), 2);
    floors_w += a.config.floor_w;
    demands_w += a.config.nameplate_w;
  }
  const double high_w = std::round(floors_w + o.high_fraction * (demands_w - floors_w));
  const double low_w = std::round(floors_w + o.low_fraction * (demands_w - floors_w));
  fmt::print(stderr,
             "fleet_scale: {} agents on {} connections, floors {:.0f} W, demand {:.0f} W, site "
             "budget {:.0f} W / {:.0f} W every {} s, phase {} s\n",
             o.agents, o.stores, floors_w, demands_w, high_w, low_w, o.change_every_s,
             o.duration_s);

  // etcd.
  std::string why;
  std::optional<coord::etcd_test::EtcdCluster> etcd = coord::etcd_test::EtcdCluster::Start(1, &why);
  if (!etcd) {
    fmt::print(stderr, "fleet_scale: cannot start etcd: {}\n", why);
    return 2;
  }
  const std::string etcd_url = etcd->endpoint(0);
  const int etcd_port = PortOf(etcd_url);
  const pid_t etcd_pid = ChildNamed("etcd");
  signal(SIGPIPE, SIG_IGN);  // httplib 0.11 writes without MSG_NOSIGNAL (etcd is started)
  std::unique_ptr<EtcdProxy> proxy = EtcdProxy::Start(etcd_port, &why);
  if (!proxy) {
    fmt::print(stderr, "fleet_scale: {}\n", why);
    return 2;
  }

  // The coordinator's command line (started once every agent is registered, below).
  char log_dir[] = "/tmp/headroom-fleet-scale-XXXXXX";
  if (mkdtemp(log_dir) == nullptr) {
    fmt::print(stderr, "fleet_scale: mkdtemp: {}\n", std::strerror(errno));
    return 2;
  }
  const std::string log_path = std::string(log_dir) + "/coordinator.log";
  const std::vector<std::string> args = {
      o.headroom,        "coordinator",
      "--etcd",          fmt::format("http://127.0.0.1:{}", proxy->port()),
      "--site",          kSite,
      "--site-budget-w", fmt::format("{:.0f}", high_w),
      "--period-s",      fmt::format("{}", kPeriodS),
      "--lease-ttl-s",   std::to_string(kLeaseTtlS),
      "--listen",        "127.0.0.1:0"};
  // Set-up failures from here on stop the agents' threads and say where the coordinator's log
  // is.
  std::atomic<bool> stop{false};
  std::vector<std::unique_ptr<Worker>> workers;
  std::unique_ptr<CoordinatorProcess> coordinator;
  const auto stop_workers = [&] {
    stop.store(true);
    for (auto& w : workers) {
      if (w->thread.joinable()) w->thread.join();
      if (w->store) w->store->CancelFollows();
    }
    for (SimAgent& a : agents) {
      if (a.watch.joinable()) a.watch.join();
    }
  };

  // The ledger's writes, watched; the agents.
  const coord::Keys keys(kSite);
  auto watch_store = coord::EtcdStore::Open(etcd_url, o.etcd_timeout_s);
  auto probe_etcd = coord::EtcdStore::Open(etcd_url, 10.0);
  if (!watch_store || !probe_etcd) {
    fmt::print(stderr, "fleet_scale: cannot open etcd for the watch or the probe\n");
    return 2;
  }
  LedgerWatcher watcher(std::move(*watch_store), keys.ledger());
  RecordingStore probe_store(**probe_etcd);

  for (int k = 0; k < o.stores; ++k) {
    auto w = std::make_unique<Worker>();
    auto s = coord::EtcdStore::Open(etcd_url, o.etcd_timeout_s);
    if (!s) {
      fmt::print(stderr, "fleet_scale: cannot open etcd: {}\n", s.error().message());
      return 2;
    }
    w->etcd = std::move(*s);
    w->store = std::make_unique<RecordingStore>(*w->etcd);
    workers.push_back(std::move(w));
  }
  const auto quiet = [](const std::string&) {};
  for (size_t i = 0; i < agents.size(); ++i) {
    Worker& w = *workers[i % workers.size()];
    w.agents.push_back(i);
    agents[i].member =
        std::make_unique<coord::FleetMember>(*w.store, agents[i].config, NowS, quiet);
  }
  if (o.watch) {
    // A thread per member, as each agent has: its watch stream on its own connection.
    for (SimAgent& a : agents) {
      a.watch = std::thread([&a, &stop] {
        while (!stop.load(std::memory_order_relaxed)) {
          const Status followed =
              a.member->WatchGrant(kGrantQuietS, [&a] { RecordAct(a, a.member->Current()); });
          if (!followed && !stop.load(std::memory_order_relaxed)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(250));  // as the agent
          }
        }
      });
    }
  }
  const double first_tick_s = NowS();
  for (size_t k = 0; k < workers.size(); ++k) {
    // Staggered: the connections' rounds spread over the step.
    const double tick_s =
        first_tick_s + o.step_s * static_cast<double>(k) / static_cast<double>(workers.size());
    Worker* w = workers[k].get();
    w->thread = std::thread(
        [w, &agents, tick_s, &o, &stop] { RunWorker(*w, agents, tick_s, o.step_s, stop); });
  }
  const auto fail = [&](const std::string& what) {
    stop_workers();
    fmt::print(stderr, "fleet_scale: {}{}\n{}", what,
               coordinator ? fmt::format("; the coordinator's log ({}) ends:", log_path) : "",
               coordinator ? coordinator->tail() : "");
    return 2;
  };
  // Every agent registered before the coordinator starts: its first period then admits them all.
  // (Started the other way round, agents that register after a period has granted the whole site
  // wait for watts no plan ever frees: coord::Plan lowers no grant to make room for a waiting
  // newcomer. Reported with the measurements, docs/PERFORMANCE.md.)
  const auto registered = [&] {
    int n = 0;
    for (const auto& w : workers) n += w->registered.load();
    return n;
  };
  const double register_deadline_s = NowS() + o.admit_timeout_s;
  while (registered() < o.agents) {
    if (NowS() > register_deadline_s) {
      return fail(fmt::format("{} of {} agents registered after {} s", registered(), o.agents,
                              o.admit_timeout_s));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double registered_after_s = NowS() - first_tick_s;
  const double coordinator_start_s = NowS();

  coordinator = CoordinatorProcess::Start(args, log_path, &why);
  if (!coordinator) return fail(fmt::format("cannot start {}: {}", o.headroom, why));
  const double start_deadline_s = NowS() + kStartWaitS;
  while (coordinator->port() == 0 && coordinator->running() && NowS() < start_deadline_s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (coordinator->port() == 0) return fail("no 'listening on' line from the coordinator");
  const int api_port = coordinator->port();
  for (;;) {
    const std::optional<std::string> s = HttpGet(api_port, "/v1/status");
    if (s && json::parse(*s, nullptr, false).value("role", "") == "leader") break;
    if (NowS() > start_deadline_s || !coordinator->running()) {
      return fail("the coordinator did not lead");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  const auto granted = [&] {
    int n = 0;
    for (const auto& w : workers) n += w->granted.load();
    return n;
  };
  const double admit_deadline_s = NowS() + o.admit_timeout_s;
  while (granted() < o.agents) {
    if (NowS() > admit_deadline_s || !coordinator->running()) {
      return fail(fmt::format("{} of {} agents granted after {} s", granted(), o.agents,
                              o.admit_timeout_s));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double admitted_after_s = NowS() - coordinator_start_s;
  fmt::print(stderr,
             "fleet_scale: every agent registered {:.1f} s after its first step, and granted "
             "{:.1f} s after the coordinator started\n",
             registered_after_s, admitted_after_s);
  SleepUntilS(NowS() + o.settle_s);

  // The steady phase.
  const auto follows = [&] {
    uint64_t n = 0;
    for (const auto& w : workers) n += w->store->follows();
    return n;
  };
  const auto grants_watched = [&] {
    uint64_t n = 0;
    for (const SimAgent& a : agents) n += a.member->status().grants_watched;
    return n;
  };
  const uint64_t follows_before = follows();
  const uint64_t grants_watched_before = grants_watched();
  const std::map<std::string, double> etcd_before = ScrapeEtcd(etcd_port);
  const double phase_begin_s = NowS();
  const double coord_cpu_before_s = ProcCpuS(coordinator->pid()).value_or(0.0);
  const double etcd_cpu_before_s = ProcCpuS(etcd_pid).value_or(0.0);
  const double self_cpu_before_s = ProcCpuS(getpid()).value_or(0.0);
  const auto [machine_busy_before_s, machine_total_before_s] = MachineCpuS();
  const double phase_end_s = phase_begin_s + o.duration_s;
  std::vector<SiteBudgetChange> changes;
  std::vector<Probe> probes;
  uint64_t probe_failures = 0;
  {
    // Each change at a different point of the coordinator's period (deterministic jitter).
    int change = 0;
    const auto change_at = [&](int k) {
      return phase_begin_s + o.change_every_s / 2 + k * o.change_every_s +
             kPeriodS * Uniform(o.seed, 1000003, static_cast<uint64_t>(k));
    };
    double next_change_s = change_at(change);
    double next_probe_s = phase_begin_s + o.probe_every_s / 4;
    bool lower = true;
    auto api = Client(api_port, 5.0);
    while (true) {
      const double next_s = std::min(next_change_s, next_probe_s);
      if (next_s >= phase_end_s - 0.5) break;
      SleepUntilS(next_s);
      if (next_change_s <= next_probe_s) {
        SiteBudgetChange c;
        c.lower = lower;
        c.site_budget_w = lower ? low_w : high_w;
        c.t_s = NowS();
        auto r =
            api->Post("/v1/site-budget", fmt::format(R"({{"site_budget_w": {}}})", c.site_budget_w),
                      "application/json");
        c.status = r ? r->status : 0;
        if (c.status != 202) {  // 202: the target is in the store
          fmt::print(stderr, "fleet_scale: POST /v1/site-budget {}: {}\n", c.site_budget_w,
                     r ? r->body : std::string("no answer"));
        }
        changes.push_back(c);
        lower = !lower;
        next_change_s = change_at(++change);
      } else {
        if (auto p = ProbeSite(etcd_port, probe_store, keys)) {
          probes.push_back(*p);
        } else {
          ++probe_failures;
        }
        next_probe_s += o.probe_every_s;
      }
    }
  }
  SleepUntilS(phase_end_s);
  const double phase_s = NowS() - phase_begin_s;
  const std::map<std::string, double> etcd_after = ScrapeEtcd(etcd_port);
  const uint64_t phase_follows = follows() - follows_before;
  const uint64_t phase_grants_watched = grants_watched() - grants_watched_before;
  const double coord_cpu_s = ProcCpuS(coordinator->pid()).value_or(0.0) - coord_cpu_before_s;
  const double etcd_cpu_s = ProcCpuS(etcd_pid).value_or(0.0) - etcd_cpu_before_s;
  const auto [etcd_rss_mib, etcd_hwm_mib] = ProcMemoryMiB(etcd_pid);
  const double self_cpu_s = ProcCpuS(getpid()).value_or(0.0) - self_cpu_before_s;
  const auto [machine_busy_after_s, machine_total_after_s] = MachineCpuS();
  const auto [coord_rss_mib, coord_hwm_mib] = ProcMemoryMiB(coordinator->pid());
  const std::optional<std::string> status_text = HttpGet(api_port, "/v1/status", 10.0);
  const double phase_measured_end_s = NowS();

  stop_workers();
  watcher.Stop();
  const bool coordinator_ran = coordinator->running();
  coordinator->Stop();
  const std::vector<CoordinatorProcess::Line> budget_lines = coordinator->budget_lines();
  const std::vector<LedgerSeen> ledgers = watcher.seen();
  const std::vector<EtcdProxy::Request> proxy_requests = proxy->requests();
  etcd.reset();  // killed, its directory removed

  // ---- What it measured ----
  const auto in_phase = [&](double t_s) { return t_s >= phase_begin_s && t_s < phase_end_s; };
  const auto delta = [&](const std::string& name) {
    const auto a = etcd_after.find(name);
    const auto b = etcd_before.find(name);
    return (a == etcd_after.end() ? 0.0 : a->second) - (b == etcd_before.end() ? 0.0 : b->second);
  };
  const auto per_s = [&](double n) { return n / phase_s; };

  // The bench's own requests in the phase (as counted here), and the agents' rounds.
  std::map<CallRecord::Kind, uint64_t> bench_calls;
  uint64_t bench_errors = 0;
  std::vector<double> get_latency_s, all_latency_s, round_s;
  uint64_t member_steps = 0, skipped_ticks = 0;
  for (const auto& w : workers) {
    for (const CallRecord& c : w->store->calls()) {
      if (!in_phase(c.t_s)) continue;
      ++bench_calls[c.kind];
      if (!c.ok) ++bench_errors;
      all_latency_s.push_back(c.latency_s);
      if (c.kind == CallRecord::kGet) get_latency_s.push_back(c.latency_s);
    }
    for (const Worker::Round& r : w->rounds) {
      if (!in_phase(r.t_s)) continue;
      round_s.push_back(r.took_s);
      member_steps += static_cast<uint64_t>(r.members);
      skipped_ticks += static_cast<uint64_t>(r.skipped);
    }
  }

  // (a) The coordinator's period: one read of the site's keys per period (coordinator.cc Lead),
  // as the proxy saw them: how many, how far apart, how long each took to be answered.
  std::vector<double> read_starts_s, read_s, txn_s;
  for (const EtcdProxy::Request& r : proxy_requests) {
    if (!in_phase(r.sent_s)) continue;
    if (r.path == "/v3/kv/range" && r.range_of_keys) {
      read_starts_s.push_back(r.sent_s);
      read_s.push_back(r.last_byte_s - r.sent_s);
    } else if (r.path == "/v3/kv/txn") {
      txn_s.push_back(r.last_byte_s - r.sent_s);
    }
  }
  std::vector<double> period_gaps_s;
  for (size_t i = 1; i < read_starts_s.size(); ++i) {
    period_gaps_s.push_back(read_starts_s[i] - read_starts_s[i - 1]);
  }
  const double periods = static_cast<double>(read_starts_s.size());
  const double periods_expected = std::floor(phase_s / kPeriodS);
  const double longest_gap_s = Quantile(period_gaps_s, 1.0);
  const bool period_held = periods >= periods_expected - 1 && longest_gap_s < 1.5 * kPeriodS;
  std::vector<double> write_times_s;
  for (const LedgerSeen& l : ledgers) {
    if (in_phase(l.t_s)) write_times_s.push_back(l.t_s);
  }
  std::vector<double> chain_gaps_s;
  for (size_t i = 1; i < write_times_s.size(); ++i) {
    const double gap = write_times_s[i] - write_times_s[i - 1];
    if (gap < kChainGapMaxS) chain_gaps_s.push_back(gap);
  }

  // (b) Grant round trip and full reallocation, per change.
  struct ChangeResult {
    std::vector<double> first_s;  // per member: POST -> first decision on a new grant
    size_t no_new_grant = 0;
    double first_write_s = std::nan("");  // POST -> the first ledger write after it
    double ledger_settled_s = std::nan("");
    double full_s = std::nan("");  // POST -> every member on the ledger's latest seq for it
    size_t unsettled = 0;
    size_t ledger_writes = 0;
    double in_force_s = std::nan("");  // POST -> the ledger's budget in force is the new one
    double asked_s = std::nan("");     // POST -> the coordinator's "target written" line
  };
  std::vector<ChangeResult> results(changes.size());
  std::vector<double> all_first_s, down_first_s, up_first_s;
  for (size_t c = 0; c < changes.size(); ++c) {
    const double t0 = changes[c].t_s;
    const double t1 = c + 1 < changes.size() ? changes[c + 1].t_s : phase_measured_end_s;
    ChangeResult& r = results[c];
    const LedgerSeen* last = nullptr;
    for (const LedgerSeen& l : ledgers) {
      if (l.t_s < t0 || l.t_s >= t1) continue;
      if (r.ledger_writes++ == 0) r.first_write_s = l.t_s - t0;
      if (std::isnan(r.in_force_s) &&
          std::abs(l.ledger.site_budget_w - changes[c].site_budget_w) < 1e-6) {
        r.in_force_s = l.t_s - t0;
      }
      last = &l;
    }
    if (last != nullptr) r.ledger_settled_s = last->t_s - t0;
    for (const CoordinatorProcess::Line& l : budget_lines) {
      if (l.t_s >= t0 && l.t_s < t1 && l.text.find("target written") != std::string::npos) {
        r.asked_s = l.t_s - t0;
        break;
      }
    }
    double full_t = t0;
    for (const SimAgent& a : agents) {
      const auto& acts = a.acts;
      const auto after = std::lower_bound(acts.begin(), acts.end(), t0,
                                          [](const ActRecord& x, double t) { return x.t_s < t; });
      const int64_t seq0 = after == acts.begin() ? 0 : std::prev(after)->seq;
      bool found = false;
      for (auto it = after; it != acts.end() && it->t_s < t1; ++it) {
        if (it->state == Acting::State::kGranted && it->seq > seq0) {
          r.first_s.push_back(it->t_s - t0);
          found = true;
          break;
        }
      }
      if (!found) ++r.no_new_grant;
      if (last == nullptr) continue;
      const auto job = last->ledger.jobs.find(a.config.job);
      if (job == last->ledger.jobs.end() || job->second.lease == 0) continue;
      bool settled = false;
      for (auto it = after; it != acts.end() && it->t_s < t1; ++it) {
        if (it->state == Acting::State::kGranted && it->seq >= job->second.seq) {
          full_t = std::max(full_t, it->t_s);
          settled = true;
          break;
        }
      }
      if (!settled) ++r.unsettled;
    }
    if (last != nullptr && r.unsettled == 0) r.full_s = full_t - t0;
    for (const double v : r.first_s) {
      all_first_s.push_back(v);
      (changes[c].lower ? down_first_s : up_first_s).push_back(v);
    }
  }

  // The invariant: at every change of any member's acting budget in the phase, the sum over
  // members (granted or fenced: the jobs in the ledger) <= the budget in force - reserve, as the
  // ledger last delivered by the watch had it.
  // A member acting on a grant shows that the ledger holding it was written (the coordinator
  // writes a grant only with or after the ledger that holds it): the budget in force is then
  // at least that ledger's, even when this bench's watch of the ledger (one stream, parsing
  // the whole ledger) delivers it after a member's own watch delivered the grant.
  struct Event {
    double t_s;
    size_t agent;
    double counted_w;
    size_t implied_ledger;  // the first ledger holding the grant acted on + 1; 0: none
  };
  const auto implied_ledger = [&](size_t agent, const ActRecord& x) -> size_t {
    if (x.state != Acting::State::kGranted) return 0;
    for (size_t k = 0; k < ledgers.size(); ++k) {
      const auto job = ledgers[k].ledger.jobs.find(agents[agent].config.job);
      if (job != ledgers[k].ledger.jobs.end() && job->second.seq >= x.seq) return k + 1;
    }
    return 0;
  };
  std::vector<Event> events;
  std::vector<double> fenced_s(agents.size(), 0.0), local_s(agents.size(), 0.0);
  for (size_t i = 0; i < agents.size(); ++i) {
    const auto& acts = agents[i].acts;
    for (size_t k = 0; k < acts.size(); ++k) {
      const ActRecord& x = acts[k];
      events.push_back({x.t_s, i, x.state == Acting::State::kLocal ? 0.0 : x.budget_w,
                        in_phase(x.t_s) ? implied_ledger(i, x) : 0});
      const double from = std::max(x.t_s, phase_begin_s);
      const double to = std::min(k + 1 < acts.size() ? acts[k + 1].t_s : phase_end_s, phase_end_s);
      if (to > from) {
        if (x.state == Acting::State::kFenced) fenced_s[i] += to - from;
        if (x.state == Acting::State::kLocal) local_s[i] += to - from;
      }
    }
  }
  std::sort(events.begin(), events.end(),
            [](const Event& a, const Event& b) { return a.t_s < b.t_s; });
  std::vector<double> acting_w(agents.size(), 0.0);
  double sum_w = 0;
  size_t ledger_at = 0;
  double allowed_w = std::nan("");
  uint64_t violations = 0, checks = 0;
  double min_slack_w = INFINITY;
  const double tolerance_w = kInvariantTolW * static_cast<double>(agents.size() + 1);
  for (size_t e = 0; e < events.size(); ++e) {
    const Event& ev = events[e];
    sum_w += ev.counted_w - acting_w[ev.agent];
    acting_w[ev.agent] = ev.counted_w;
    while (ledger_at < ledgers.size() &&
           (ledgers[ledger_at].t_s <= ev.t_s || ledger_at < ev.implied_ledger)) {
      allowed_w = ledgers[ledger_at].ledger.site_budget_w - ledgers[ledger_at].ledger.reserve_w;
      ++ledger_at;
    }
    if (!in_phase(ev.t_s) || std::isnan(allowed_w)) continue;
    if (e + 1 < events.size() && events[e + 1].t_s == ev.t_s) continue;  // the same instant
    ++checks;
    min_slack_w = std::min(min_slack_w, allowed_w - sum_w);
    if (sum_w > allowed_w + tolerance_w) ++violations;
  }
  double fenced_total_s = 0, local_total_s = 0;
  for (size_t i = 0; i < agents.size(); ++i) {
    fenced_total_s += fenced_s[i];
    local_total_s += local_s[i];
  }

  // The coordinator's own account.
  json status = status_text ? json::parse(*status_text, nullptr, false) : json(nullptr);
  const auto status_num = [&](const char* key) {
    return status.is_object() && status.contains(key) && status[key].is_number()
               ? status[key].get<double>()
               : std::nan("");
  };
  std::vector<double> probe_raw, probe_get, probe_values, probe_plan, probe_get_cpu,
      probe_values_cpu, probe_plan_cpu;
  size_t probe_keys = 0, probe_bytes = 0;
  for (const Probe& p : probes) {
    probe_raw.push_back(p.raw_range_s);
    probe_get.push_back(p.store_get_s);
    probe_values.push_back(p.values_s);
    probe_plan.push_back(p.plan_s);
    probe_get_cpu.push_back(p.store_get_cpu_s);
    probe_values_cpu.push_back(p.values_cpu_s);
    probe_plan_cpu.push_back(p.plan_cpu_s);
    probe_keys = p.keys;
    probe_bytes = p.bytes;
  }

  // ---- Report ----
  const double coord_cpu_pct = 100.0 * coord_cpu_s / phase_s;
  const double etcd_cpu_pct = 100.0 * etcd_cpu_s / phase_s;
  const double self_cpu_pct = 100.0 * self_cpu_s / phase_s;
  const double machine_busy_pct = 100.0 * (machine_busy_after_s - machine_busy_before_s) / phase_s;
  const double machine_cores = (machine_total_after_s - machine_total_before_s) / phase_s;
  const double etcd_requests = delta("grpc:Range") + delta("grpc:Put") + delta("grpc:Txn") +
                               delta("grpc:DeleteRange") + delta("grpc:LeaseGrant") +
                               delta("grpc:LeaseKeepAlive") + delta("grpc:LeaseRevoke") +
                               delta("grpc:Watch");
  const double fsyncs = delta("etcd_disk_wal_fsync_duration_seconds_count");
  const double ms = 1e3;

  json out;
  out["agents"] = o.agents;
  out["stores"] = o.stores;
  out["grant"] = o.watch ? "watched" : "polled";
  out["step_s"] = o.step_s;
  out["period_s"] = kPeriodS;
  out["phase_s"] = phase_s;
  out["site_budget_w"] = {
      {"high", high_w}, {"low", low_w}, {"floors", floors_w}, {"demand", demands_w}};
  out["registered_after_s"] = registered_after_s;
  out["admitted_after_s"] = admitted_after_s;
  out["coordinator"] = {
      {"periods", periods},
      {"periods_expected", periods_expected},
      {"period_held", period_held},
      {"period_p50_s", Num(Quantile(period_gaps_s, 0.5))},
      {"period_p99_s", Num(Quantile(period_gaps_s, 0.99))},
      {"period_max_s", Num(longest_gap_s)},
      {"site_read_p50_s", Num(Quantile(read_s, 0.5))},
      {"site_read_p99_s", Num(Quantile(read_s, 0.99))},
      {"site_read_max_s", Num(Quantile(read_s, 1.0))},
      {"txns", txn_s.size()},
      {"txn_p50_s", Num(Quantile(txn_s, 0.5))},
      {"txn_max_s", Num(Quantile(txn_s, 1.0))},
      {"ledger_writes", write_times_s.size()},
      {"ledger_writes_per_s", per_s(static_cast<double>(write_times_s.size()))},
      {"chain_gaps_s", chain_gaps_s},
      {"chain_gap_p50_s", Num(Quantile(chain_gaps_s, 0.5))},
      {"chain_gap_max_s", Num(Quantile(chain_gaps_s, 1.0))},
      {"cpu_pct_of_one_core", coord_cpu_pct},
      {"rss_mib", coord_rss_mib},
      {"hwm_mib", coord_hwm_mib},
      {"ran_to_the_end", coordinator_ran},
      {"status",
       {{"ledger_writes", Num(status_num("ledger_writes"))},
        {"write_conflicts", Num(status_num("write_conflicts"))},
        {"unknown_outcomes", Num(status_num("unknown_outcomes"))},
        {"invariant_refusals", Num(status_num("invariant_refusals"))},
        {"malformed_values", Num(status_num("malformed_values"))},
        {"txn_latency_p50_s", Num(status_num("txn_latency_p50_s"))},
        {"txn_latency_p99_s", Num(status_num("txn_latency_p99_s"))},
        {"decrease_settle_s", status.is_object() && status.contains("decrease_settle_s")
                                  ? status["decrease_settle_s"]
                                  : json(nullptr)},
        {"last_error", status.is_object() ? status.value("last_error", "") : ""}}}};
  json changes_json = json::array();
  for (size_t c = 0; c < changes.size(); ++c) {
    const ChangeResult& r = results[c];
    changes_json.push_back({{"t_s", changes[c].t_s - phase_begin_s},
                            {"site_budget_w", changes[c].site_budget_w},
                            {"lower", changes[c].lower},
                            {"http_status", changes[c].status},
                            {"members_with_new_grant", r.first_s.size()},
                            {"members_without", r.no_new_grant},
                            {"first_p50_s", Num(Quantile(r.first_s, 0.5))},
                            {"first_p99_s", Num(Quantile(r.first_s, 0.99))},
                            {"first_max_s", Num(Quantile(r.first_s, 1.0))},
                            {"asked_s", Num(r.asked_s)},
                            {"first_ledger_write_s", Num(r.first_write_s)},
                            {"ledger_writes", r.ledger_writes},
                            {"ledger_settled_s", Num(r.ledger_settled_s)},
                            {"in_force_s", Num(r.in_force_s)},
                            {"full_reallocation_s", Num(r.full_s)},
                            {"members_unsettled", r.unsettled}});
  }
  json lines_json = json::array();
  for (const auto& l : budget_lines) {
    if (in_phase(l.t_s)) lines_json.push_back({{"t_s", l.t_s - phase_begin_s}, {"line", l.text}});
  }
  out["grant_round_trip"] = {{"pairs", all_first_s.size()},
                             {"p50_s", Num(Quantile(all_first_s, 0.5))},
                             {"p99_s", Num(Quantile(all_first_s, 0.99))},
                             {"max_s", Num(Quantile(all_first_s, 1.0))},
                             {"down_p50_s", Num(Quantile(down_first_s, 0.5))},
                             {"down_p99_s", Num(Quantile(down_first_s, 0.99))},
                             {"up_p50_s", Num(Quantile(up_first_s, 0.5))},
                             {"up_p99_s", Num(Quantile(up_first_s, 0.99))},
                             {"changes", changes_json},
                             {"coordinator_budget_lines", lines_json}};
  out["etcd"] = {
      {"requests_per_s", per_s(etcd_requests)},
      {"requests_per_agent_per_s", per_s(etcd_requests) / o.agents},
      {"range_per_s", per_s(delta("grpc:Range"))},
      {"put_per_s", per_s(delta("grpc:Put"))},
      {"txn_per_s", per_s(delta("grpc:Txn"))},
      {"lease_keepalive_per_s", per_s(delta("grpc:LeaseKeepAlive"))},
      {"lease_grant_per_s", per_s(delta("grpc:LeaseGrant"))},
      {"watch_per_s", per_s(delta("grpc:Watch"))},
      {"mvcc_txn_per_s", per_s(delta("etcd_mvcc_txn_total"))},
      {"mvcc_put_per_s", per_s(delta("etcd_mvcc_put_total"))},
      {"mvcc_range_per_s", per_s(delta("etcd_mvcc_range_total"))},
      {"mvcc_delete_per_s", per_s(delta("etcd_mvcc_delete_total"))},
      {"proposals_committed_per_s", per_s(delta("etcd_server_proposals_committed_total"))},
      {"wal_fsyncs_per_s", per_s(fsyncs)},
      {"wal_fsync_mean_ms",
       Num(fsyncs > 0 ? ms * delta("etcd_disk_wal_fsync_duration_seconds_sum") / fsyncs : NAN)},
      {"keys", Num(etcd_after.contains("etcd_debugging_mvcc_keys_total")
                       ? etcd_after.at("etcd_debugging_mvcc_keys_total")
                       : NAN)},
      {"revisions_per_s", per_s(delta("etcd_debugging_mvcc_current_revision"))},
      {"db_mib", Num(etcd_after.contains("etcd_mvcc_db_total_size_in_bytes")
                         ? etcd_after.at("etcd_mvcc_db_total_size_in_bytes") / 1048576.0
                         : NAN)},
      {"db_growth_mib_per_min",
       60.0 * per_s(delta("etcd_mvcc_db_total_size_in_bytes")) / 1048576.0},
      {"cpu_pct_of_one_core", etcd_cpu_pct},
      {"rss_mib", etcd_rss_mib},
      {"hwm_mib", etcd_hwm_mib}};
  out["agents_side"] = {
      {"member_steps_per_s", per_s(static_cast<double>(member_steps))},
      {"steps_per_member_per_s", per_s(static_cast<double>(member_steps)) / o.agents},
      {"requests_per_s", per_s(static_cast<double>(all_latency_s.size()))},
      {"get_per_s", per_s(static_cast<double>(bench_calls[CallRecord::kGet]))},
      {"put_per_s", per_s(static_cast<double>(bench_calls[CallRecord::kPut]))},
      {"keepalive_per_s", per_s(static_cast<double>(bench_calls[CallRecord::kKeepAlive]))},
      {"watch_streams_per_s", per_s(static_cast<double>(phase_follows))},
      {"grants_watched", phase_grants_watched},
      {"txn", bench_calls[CallRecord::kTxn]},
      {"lease_grants", bench_calls[CallRecord::kLeaseGrant]},
      {"errors", bench_errors},
      {"get_latency_p50_ms", Num(ms * Quantile(get_latency_s, 0.5))},
      {"get_latency_p99_ms", Num(ms * Quantile(get_latency_s, 0.99))},
      {"request_latency_p99_ms", Num(ms * Quantile(all_latency_s, 0.99))},
      {"round_p50_s", Num(Quantile(round_s, 0.5))},
      {"round_p99_s", Num(Quantile(round_s, 0.99))},
      {"skipped_ticks", skipped_ticks},
      {"fenced_fraction", fenced_total_s / (phase_s * o.agents)},
      {"local_fraction", local_total_s / (phase_s * o.agents)},
      {"bench_cpu_pct_of_one_core", self_cpu_pct}};
  out["probe"] = {{"count", probes.size()},
                  {"failures", probe_failures},
                  {"keys", probe_keys},
                  {"answer_bytes", probe_bytes},
                  {"range_p50_ms", Num(ms * Quantile(probe_raw, 0.5))},
                  {"store_get_p50_ms", Num(ms * Quantile(probe_get, 0.5))},
                  {"values_p50_ms", Num(ms * Quantile(probe_values, 0.5))},
                  {"plan_p50_ms", Num(ms * Quantile(probe_plan, 0.5))},
                  {"store_get_cpu_p50_ms", Num(ms * Quantile(probe_get_cpu, 0.5))},
                  {"values_cpu_p50_ms", Num(ms * Quantile(probe_values_cpu, 0.5))},
                  {"plan_cpu_p50_ms", Num(ms * Quantile(probe_plan_cpu, 0.5))}};
  out["machine"] = {
      {"cores", machine_cores},
      {"busy_pct_of_one_core", machine_busy_pct},
      {"other_pct_of_one_core", machine_busy_pct - coord_cpu_pct - etcd_cpu_pct - self_cpu_pct}};
  out["invariant"] = {{"checks", checks},
                      {"violations", violations},
                      {"min_slack_w", Num(min_slack_w)},
                      {"watch_errors", watcher.errors()}};
  const bool broken = violations > 0 || status_num("invariant_refusals") > 0;
  out["coordinator_log"] = broken ? json(log_path) : json(nullptr);  // kept only then

  const auto row = [](std::string_view what, const std::string& value) {
    fmt::print("| {} | {} |\n", what, value);
  };
  fmt::print("\n| {} agents, {} connections, grants {}, phase {:.0f} s | |\n|---|---|\n", o.agents,
             o.stores, o.watch ? "watched" : "polled at every step", phase_s);
  row("coordinator periods (its reads of the site)",
      fmt::format("{:.0f} in {:.1f} s, apart p50 {:.3f} / p99 {:.3f} / max {:.3f} s: {}", periods,
                  phase_s, Quantile(period_gaps_s, 0.5), Quantile(period_gaps_s, 0.99),
                  longest_gap_s, period_held ? "1 s period held" : "1 s period NOT held"));
  row("coordinator's read of the site answered in p50 / p99 / max",
      fmt::format("{:.1f} / {:.1f} / {:.1f} ms", ms * Quantile(read_s, 0.5),
                  ms * Quantile(read_s, 0.99), ms * Quantile(read_s, 1.0)));
  row("ledger writes",
      fmt::format("{} ({:.2f}/s); between writes of one change p50 {:.2f} s, max "
                  "{:.2f} s",
                  write_times_s.size(), per_s(static_cast<double>(write_times_s.size())),
                  Quantile(chain_gaps_s, 0.5), Quantile(chain_gaps_s, 1.0)));
  row("grant round trip p50 / p99 / max",
      fmt::format("{:.2f} / {:.2f} / {:.2f} s ({} member-changes)", Quantile(all_first_s, 0.5),
                  Quantile(all_first_s, 0.99), Quantile(all_first_s, 1.0), all_first_s.size()));
  row("  down / up p50",
      fmt::format("{:.2f} / {:.2f} s", Quantile(down_first_s, 0.5), Quantile(up_first_s, 0.5)));
  for (size_t c = 0; c < changes.size(); ++c) {
    const ChangeResult& r = results[c];
    row(fmt::format("  change {} ({} to {:.0f} W)", c + 1, changes[c].lower ? "down" : "up",
                    changes[c].site_budget_w),
        fmt::format("target written {:.2f} s, first ledger write {:.2f} s, {} writes, in force "
                    "{:.2f} s, full "
                    "reallocation {:.2f} s{}",
                    r.asked_s, r.first_write_s, r.ledger_writes, r.in_force_s, r.full_s,
                    r.unsettled > 0 || r.no_new_grant > 0
                        ? fmt::format(" ({} unsettled, {} without a new grant)", r.unsettled,
                                      r.no_new_grant)
                        : std::string()));
  }
  row("etcd requests/s (gRPC calls); per agent",
      fmt::format("{:.0f}: range {:.0f}, put {:.0f}, txn {:.1f}, keepalive {:.0f}, watch {:.1f}; "
                  "{:.2f}",
                  per_s(etcd_requests), per_s(delta("grpc:Range")), per_s(delta("grpc:Put")),
                  per_s(delta("grpc:Txn")), per_s(delta("grpc:LeaseKeepAlive")),
                  per_s(delta("grpc:Watch")), per_s(etcd_requests) / o.agents));
  row("agents: watch streams made /s; grants the watch brought",
      fmt::format("{:.1f}; {}", per_s(static_cast<double>(phase_follows)), phase_grants_watched));
  row("etcd mvcc txn / put / range per s",
      fmt::format("{:.1f} / {:.0f} / {:.0f}", per_s(delta("etcd_mvcc_txn_total")),
                  per_s(delta("etcd_mvcc_put_total")), per_s(delta("etcd_mvcc_range_total"))));
  row("etcd revisions/s; its database (no compaction)",
      fmt::format("{:.0f}; {:.1f} MiB, growing {:.1f} MiB/min",
                  per_s(delta("etcd_debugging_mvcc_current_revision")),
                  etcd_after.contains("etcd_mvcc_db_total_size_in_bytes")
                      ? etcd_after.at("etcd_mvcc_db_total_size_in_bytes") / 1048576.0
                      : NAN,
                  60.0 * per_s(delta("etcd_mvcc_db_total_size_in_bytes")) / 1048576.0));
  row("etcd WAL fsyncs/s (mean)",
      fmt::format(
          "{:.0f} ({:.2f} ms)", per_s(fsyncs),
          fsyncs > 0 ? ms * delta("etcd_disk_wal_fsync_duration_seconds_sum") / fsyncs : NAN));
  row("CPU, % of one core: coordinator / etcd / bench; the whole machine",
      fmt::format("{:.1f} / {:.1f} / {:.1f}; {:.0f} of {:.0f}", coord_cpu_pct, etcd_cpu_pct,
                  self_cpu_pct, machine_busy_pct, 100.0 * machine_cores));
  row("coordinator memory: VmRSS / VmHWM",
      fmt::format("{:.1f} / {:.1f} MiB (etcd's: {:.0f} / {:.0f} MiB)", coord_rss_mib, coord_hwm_mib,
                  etcd_rss_mib, etcd_hwm_mib));
  row("coordinator txn latency p50 / p99 (its status)",
      fmt::format("{:.1f} / {:.1f} ms", ms * status_num("txn_latency_p50_s"),
                  ms * status_num("txn_latency_p99_s")));
  row("the site read as the leader reads it (p50, wall): range / EtcdStore::Get / values / plan",
      fmt::format("{:.1f} / {:.1f} / {:.1f} / {:.2f} ms ({} keys, {:.2f} MB)",
                  ms * Quantile(probe_raw, 0.5), ms * Quantile(probe_get, 0.5),
                  ms * Quantile(probe_values, 0.5), ms * Quantile(probe_plan, 0.5), probe_keys,
                  static_cast<double>(probe_bytes) / 1e6));
  row("  the same, CPU of the reading thread: EtcdStore::Get / values / plan",
      fmt::format("{:.1f} / {:.1f} / {:.2f} ms", ms * Quantile(probe_get_cpu, 0.5),
                  ms * Quantile(probe_values_cpu, 0.5), ms * Quantile(probe_plan_cpu, 0.5)));
  row("agents: steps per member per s; round p50 / p99; ticks skipped",
      fmt::format("{:.2f}; {:.3f} / {:.3f} s; {}",
                  per_s(static_cast<double>(member_steps)) / o.agents, Quantile(round_s, 0.5),
                  Quantile(round_s, 0.99), skipped_ticks));
  row("agents: grant read p50 / p99; errors; time fenced",
      fmt::format("{:.1f} / {:.1f} ms; {}; {:.2f} %", ms * Quantile(get_latency_s, 0.5),
                  ms * Quantile(get_latency_s, 0.99), bench_errors,
                  100.0 * fenced_total_s / (phase_s * o.agents)));
  row("invariant: Σ acting ≤ budget in force − reserve",
      fmt::format("{} violations in {} checks (least slack {:.1f} W); coordinator refusals {}",
                  violations, checks, min_slack_w, status_num("invariant_refusals")));

  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path);
    f << out.dump(2) << "\n";
    if (!f) {
      fmt::print(stderr, "fleet_scale: cannot write {}\n", o.json_path);
      return 2;
    }
  }
  if (broken) {
    fmt::print(stderr, "fleet_scale: the invariant was broken; the coordinator's log: {}\n",
               log_path);
    return 1;
  }
  std::error_code ignored;
  std::filesystem::remove_all(log_dir, ignored);
  return 0;
}

}  // namespace
}  // namespace headroom::bench

int main(int argc, char** argv) {
  headroom::bench::Options o;
  CLI::App app{"One headroom coordinator and N simulated agents on one etcd (docs/PERFORMANCE.md)"};
  app.add_option("--headroom", o.headroom, "The headroom binary");
  app.add_option("--agents", o.agents, "Simulated agents")->check(CLI::Range(1, 100000));
  app.add_option("--stores", o.stores, "etcd connections, one thread each")
      ->check(CLI::Range(1, 256));
  app.add_option("--duration-s", o.duration_s, "The measured phase")
      ->check(CLI::Range(5.0, 3600.0));
  app.add_option("--step-s", o.step_s, "Each member's step")->check(CLI::Range(0.01, 10.0));
  app.add_option("--change-every-s", o.change_every_s, "Site budget changes")
      ->check(CLI::Range(1.0, 3600.0));
  app.add_option("--seed", o.seed, "Floors and nameplates");
  bool poll = false;
  app.add_flag("--poll", poll,
               "Members read their grant at every step, with no watch (the agents before the "
               "grant's watch)");
  app.add_option("--json", o.json_path, "Also write the results here");
  CLI11_PARSE(app, argc, argv);
  o.watch = !poll;
  if (!headroom::coord::etcd_test::EtcdCluster::Available()) {
    fmt::print(stderr, "fleet_scale: {} not found\n", headroom::coord::etcd_test::kEtcdBinary);
    return 2;
  }
  return headroom::bench::Run(o);
}
