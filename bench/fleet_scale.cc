// headroom_fleet_scale: one site at scale (docs/PERFORMANCE.md, "A site at scale"). One real
// `headroom coordinator` process and N light simulated agents on one etcd of its own:
//
//   headroom_fleet_scale --headroom build/bin/headroom --agents 1000 --duration-s 60 [--json F]
//
// Reads top to bottom: options -> the site's agents (deterministic floors and nameplates) ->
// etcd (tests/coord/etcd_cluster.h: a single member in a temporary directory, killed at the end
// pass or fail) and a pass-through proxy in front of it for the coordinator -> the agents
// (coord::SiteMember over 32 coord::EtcdStore connections, one thread each, every member doing
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
#include "coord/forwarding_store.h"
#include "coord/layout.h"
#include "coord/member.h"
#include "coord/memory_store.h"
#include "coord/plan.h"
#include "coord/store.h"
#include "etcd/etcd_store.h"
#include "etcd/etcd_wire.h"
#include "tests/coord/etcd_cluster.h"

#include "bench/fleet_scale/agents.h"
#include "bench/fleet_scale/coordinator_process.h"
#include "bench/fleet_scale/etcd_proxy.h"
#include "bench/fleet_scale/http.h"
#include "bench/fleet_scale/ledger_watcher.h"
#include "bench/fleet_scale/options.h"
#include "bench/fleet_scale/probe.h"
#include "bench/fleet_scale/system.h"

namespace headroom::bench {
namespace {

using coord::Acting;
using json = nlohmann::ordered_json;

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
    agents[i].member = std::make_unique<coord::SiteMember>(*w.store, agents[i].config, NowS, quiet);
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
