// `headroom analyze` and `headroom fleet` on a real Prometheus (/usr/bin/prometheus, Debian's
// package; scripts/setup.sh installs it): a test exporter serves a known trace in the DCGM
// exporter's exposition format, with the samples' own timestamps; Prometheus scrapes it; the
// binary reads the range back (in one query, in chunks, from a saved answer) and must report what
// it reports for the same trace as a CSV file. Skipped without prometheus.
//
// The exporter and Prometheus are started and stopped here, on free loopback ports, in a
// temporary directory: no fixed port, no sleep as synchronisation (polls with deadlines), the
// Prometheus process killed by PID when the test ends, pass or fail, and by the kernel
// (PR_SET_PDEATHSIG) if the test dies.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../support/spawn.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kPrometheusBinary = "/usr/bin/prometheus";
constexpr const char* kMetric = "DCGM_FI_DEV_POWER_USAGE";
constexpr int kGpus = 4;
constexpr int kRows = 60;
constexpr int64_t kSpacingMs = 500;  // the trace's sample spacing, and the query's step
// How far in the past the trace lies. A fresh TSDB takes samples of any age for its first head
// block; 10 min keeps the whole trace clear of "now" and inside count_over_time(...[1h]).
constexpr int64_t kAgeMs = 10 * 60 * 1000;
constexpr double kReadyTimeoutS = 30.0;
// Prometheus hands a new target to its scrape loop after its discovery and scrape managers'
// 5 s update ticks: the first scrape comes 5 to 10 s after start.
constexpr double kIngestTimeoutS = 60.0;
constexpr auto kPollInterval = std::chrono::milliseconds(100);

using headroom::test_support::Cat;

Clock::time_point Deadline(double s) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int FreePort() { return headroom::test_support::FreeLoopbackPort(); }

// ---------------------------------------------------------------------------------------------
// The trace: kRows rows of kGpus GPUs, kSpacingMs apart, in decawatts (0.1 W), from a fixed
// seed: a level per GPU, a training step's high and low phases, noise.
using Trace = std::vector<std::vector<int>>;  // [row][gpu], decawatts

Trace MakeTrace() {
  std::mt19937 rng(20261202);
  Trace trace(kRows, std::vector<int>(kGpus));
  for (int k = 0; k < kRows; ++k) {
    for (int g = 0; g < kGpus; ++g) {
      const int level = 2500 + 400 * g;
      const int phase = (k / 4) % 2 == 0 ? 3000 : 0;
      trace[k][g] = level + phase + static_cast<int>(rng() % 401) - 200;
    }
  }
  return trace;
}

std::string WattsText(int decawatts) {
  return Cat(std::to_string(decawatts / 10), ".", std::to_string(decawatts % 10));
}

// Seconds from the start, as text: k * 0.5.
std::string RowSeconds(int64_t k) { return Cat(std::to_string(k / 2), k % 2 ? ".5" : ""); }

// headroom's long CSV of the trace, the GPUs named as prom/ names a single host's: the `gpu`
// label.
std::string TraceCsv(const Trace& trace) {
  std::string csv = "t_s,gpu,power_w\n";
  for (int k = 0; k < kRows; ++k) {
    for (int g = 0; g < kGpus; ++g) {
      csv += Cat(RowSeconds(k), ",", std::to_string(g), ",", WattsText(trace[k][g]), "\n");
    }
  }
  return csv;
}

// The DCGM exporter's exposition of the whole trace, each sample with its timestamp. Every scrape
// serves all of it: the first scrape Prometheus completes ingests the trace; later scrapes'
// samples are at or before each series' latest and are refused (out of order), so the stored
// samples are exactly the trace, however many scrapes there are and whichever fail.
std::string Exposition(const Trace& trace, int64_t base_ms) {
  std::string out = Cat("# HELP ", kMetric, " Power draw (in W).\n# TYPE ", kMetric, " gauge\n");
  for (int k = 0; k < kRows; ++k) {
    for (int g = 0; g < kGpus; ++g) {
      const std::string gpu = std::to_string(g);
      out += Cat(kMetric, "{gpu=\"", gpu, "\",UUID=\"GPU-5fa2c1d8-7e3b-4c1a-9d2e-00000000000", gpu,
                 "\",device=\"nvidia", gpu,
                 "\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node1\"} ",
                 WattsText(trace[k][g]), " ", std::to_string(base_ms + k * kSpacingMs), "\n");
    }
  }
  return out;
}

// GET /metrics on a free loopback port, served from its own thread until the object goes.
class Exporter {
 public:
  explicit Exporter(std::string body) : body_(std::move(body)) {
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      scrapes_.fetch_add(1);
      res.set_content(body_, "text/plain; version=0.0.4; charset=utf-8");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");  // connections queue from here on
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() is a no-op until the thread runs the accept loop: wait for it.
    const auto deadline = Deadline(10.0);
    while (port_ > 0 && !server_.is_running() && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  ~Exporter() {
    server_.stop();
    thread_.join();
  }
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  int port() const { return port_; }
  int scrapes() const { return scrapes_.load(); }

 private:
  const std::string body_;
  httplib::Server server_;
  int port_ = 0;
  std::atomic<int> scrapes_{0};
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------------
// One Prometheus process scraping one target every 100 ms, with its own data directory and log.
// Not thread-safe; start and stop it from the test's main thread (it gets SIGKILL when the thread
// that forked it ends).
class PrometheusServer {
 public:
  static bool Available() { return access(kPrometheusBinary, X_OK) == 0; }

  // Starts Prometheus and waits until it is ready (/-/ready); nullptr and *why on failure.
  static std::unique_ptr<PrometheusServer> Start(int target_port, std::string* why) {
    std::unique_ptr<PrometheusServer> p(new PrometheusServer());
    std::string pattern = "/tmp/headroom-prometheus-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      *why = Cat("mkdtemp: ", std::strerror(errno));
      return nullptr;
    }
    p->dir_ = pattern;
    p->port_ = FreePort();
    if (p->port_ == 0) {
      *why = Cat("no free loopback port: ", std::strerror(errno));
      return nullptr;
    }
    const std::string config = p->dir_ + "/prometheus.yml";
    std::ofstream(config) << Cat("global:\n  scrape_interval: 100ms\n  scrape_timeout: 100ms\n",
                                 "scrape_configs:\n  - job_name: dcgm\n    static_configs:\n",
                                 "      - targets: ['127.0.0.1:", std::to_string(target_port),
                                 "']\n");
    // --log.level=error: the exporter's repeated samples are logged as dropped at warn.
    if (!p->Launch(
            {kPrometheusBinary, Cat("--config.file=", config),
             Cat("--storage.tsdb.path=", p->dir_, "/data"),
             Cat("--web.listen-address=127.0.0.1:", std::to_string(p->port_)), "--log.level=error"},
            why)) {
      return nullptr;
    }
    if (!p->WaitReady(Deadline(kReadyTimeoutS), why)) return nullptr;
    return p;
  }

  ~PrometheusServer() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    std::error_code ignored;
    if (!dir_.empty()) fs::remove_all(dir_, ignored);
  }
  PrometheusServer(const PrometheusServer&) = delete;
  PrometheusServer& operator=(const PrometheusServer&) = delete;

  int port() const { return port_; }
  const std::string& dir() const { return dir_; }

  // GET path?params: the status and body, or status 0 when nothing answers.
  std::pair<int, std::string> Get(const std::string& path, const httplib::Params& params) const {
    httplib::Client client("127.0.0.1", port_);
    client.set_connection_timeout(2, 0);
    client.set_read_timeout(10, 0);
    auto res = client.Get(path, params, httplib::Headers{});
    if (!res) return {0, ""};
    return {res->status, res->body};
  }

  // Waits until count_over_time(metric[1h]) is `samples` for `series` series; false and *why
  // (what Prometheus has, its targets, the end of its log) when the deadline passes first.
  bool WaitSamples(const std::string& metric, size_t series, int samples,
                   Clock::time_point deadline, std::string* why) const {
    std::string last;
    while (Clock::now() < deadline) {
      if (Exited(why)) return false;
      const auto [status, body] =
          Get("/api/v1/query", {{"query", Cat("count_over_time(", metric, "[1h])")}});
      last = body;
      const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
      if (status == 200 && j.is_object() && j.value("status", "") == "success") {
        const nlohmann::json& result = j.at("data").at("result");
        size_t complete = 0;
        for (const nlohmann::json& r : result) {
          const std::string count = r.at("value").at(1).get<std::string>();
          if (std::stoi(count) > samples) {
            *why = Cat("more samples than the trace's: ", body);
            return false;
          }
          complete += std::stoi(count) == samples ? 1 : 0;
        }
        if (result.size() == series && complete == series) return true;
      }
      std::this_thread::sleep_for(kPollInterval);
    }
    *why = Cat("Prometheus did not hold ", std::to_string(samples), " samples of ",
               std::to_string(series), " series within ", std::to_string(kIngestTimeoutS),
               " s; it answered ", last, "\ntargets: ", Get("/api/v1/targets", {}).second,
               "\nits log ends:\n", LogTail());
    return false;
  }

  std::string LogTail(size_t bytes = 3000) const {
    const std::string text = Slurp(dir_ + "/prometheus.log");
    return text.size() > bytes ? text.substr(text.size() - bytes) : text;
  }

 private:
  PrometheusServer() = default;

  bool Launch(const std::vector<std::string>& args, std::string* why) {
    const pid_t pid =
        headroom::test_support::SpawnLogged(kPrometheusBinary, args, dir_ + "/prometheus.log", why);
    if (pid < 0) return false;
    pid_ = pid;
    return true;
  }

  // True, and *why, when the process has ended.
  bool Exited(std::string* why) const {
    int wstatus = 0;
    if (waitpid(pid_, &wstatus, WNOHANG) != pid_) return false;
    pid_ = -1;
    *why =
        Cat("prometheus exited (status ", std::to_string(wstatus), "); its log ends:\n", LogTail());
    return true;
  }

  bool WaitReady(Clock::time_point deadline, std::string* why) const {
    while (Clock::now() < deadline) {
      if (Exited(why)) return false;
      if (Get("/-/ready", {}).first == 200) return true;
      std::this_thread::sleep_for(kPollInterval);
    }
    *why = Cat("prometheus not ready within ", std::to_string(kReadyTimeoutS),
               " s; its log ends:\n", LogTail());
    return false;
  }

  std::string dir_;
  int port_ = 0;
  mutable pid_t pid_ = -1;  // -1 once reaped
};

// ---------------------------------------------------------------------------------------------
// The binary

struct Outcome {
  int status;
  std::string out;
  std::string err;
};

Outcome Headroom(const fs::path& dir, const std::string& args) {
  const fs::path out = dir / "stdout", err = dir / "stderr";
  const std::string cmd = Cat(HEADROOM_BINARY, " ", args, " >", out.string(), " 2>", err.string());
  const int raw = std::system(cmd.c_str());
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, Slurp(out), Slurp(err)};
}

// The JSON a command printed; a null on failure (the test reports why).
nlohmann::json JsonOf(const Outcome& o, const std::string& what) {
  EXPECT_EQ(o.status, 0) << what << ": " << o.err;
  nlohmann::json j = nlohmann::json::parse(o.out, nullptr, false);
  EXPECT_TRUE(j.is_object()) << what << " printed: " << o.out << "\n" << o.err;
  return j.is_object() ? j : nlohmann::json();
}

// `analyze --json` less what names the input: the trace's path, its format, and what its numbers
// are (present for Prometheus only).
nlohmann::json WithoutInput(nlohmann::json j) {
  if (!j.is_object()) return j;
  j.erase("trace");
  j.erase("format");
  j.erase("resolution");
  return j;
}

// `fleet --json` less the jobs' trace names.
nlohmann::json WithoutJobNames(nlohmann::json j) {
  if (!j.is_object() || !j.contains("jobs")) return j;
  for (nlohmann::json& job : j["jobs"]) job.erase("trace");
  return j;
}

TEST(PrometheusEndToEnd, AnalyzeAndFleetReadTheExportersTraceAsTheCsvFile) {
  if (!PrometheusServer::Available()) {
    GTEST_SKIP() << kPrometheusBinary
                 << " not found: run scripts/setup.sh (Debian package prometheus)";
  }
  const auto started = Clock::now();
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  const int64_t base_ms = (now_ms - kAgeMs) / 1000 * 1000;  // a whole second
  const Trace trace = MakeTrace();

  Exporter exporter(Exposition(trace, base_ms));
  ASSERT_GT(exporter.port(), 0) << "the exporter cannot listen";
  std::string why;
  const std::unique_ptr<PrometheusServer> prometheus =
      PrometheusServer::Start(exporter.port(), &why);
  ASSERT_NE(prometheus, nullptr) << why;
  ASSERT_TRUE(prometheus->WaitSamples(kMetric, kGpus, kRows, Deadline(kIngestTimeoutS), &why))
      << why;
  EXPECT_GE(exporter.scrapes(), 1);

  const fs::path dir = prometheus->dir();
  const std::string csv_path = (dir / "trace.csv").string();
  std::ofstream(csv_path) << TraceCsv(trace);

  const std::string start = std::to_string(base_ms / 1000);
  const std::string end = RowSeconds(2 * (base_ms / 1000) + kRows - 1);  // base + 29.5 s
  const std::string url = Cat("prometheus://127.0.0.1:", std::to_string(prometheus->port()));
  const std::string query =
      Cat(" --query ", kMetric, " --start ", start, " --end ", end, " --step 0.5s");
  const std::string range = url + query;

  // analyze: the file, the range in one query and in chunks of 7 steps, a saved answer.
  const nlohmann::json from_csv =
      JsonOf(Headroom(dir, Cat("analyze ", csv_path, " --json")), "csv");
  ASSERT_TRUE(from_csv.is_object());
  EXPECT_EQ(from_csv["samples"], kGpus * kRows);
  EXPECT_EQ(from_csv["gpus"], kGpus);

  const nlohmann::json one_query =
      JsonOf(Headroom(dir, Cat("analyze ", range, " --json")), "one query");
  ASSERT_TRUE(one_query.is_object());
  EXPECT_EQ(one_query["format"], "prometheus");
  ASSERT_TRUE(one_query.contains("resolution"));
  EXPECT_NE(one_query["resolution"].get<std::string>().find("step 0.5 s"), std::string::npos)
      << one_query["resolution"];
  EXPECT_EQ(WithoutInput(one_query), WithoutInput(from_csv));

  const nlohmann::json chunked =
      JsonOf(Headroom(dir, Cat("analyze ", range, " --prometheus-max-points 7 --json")), "chunked");
  EXPECT_EQ(chunked, one_query);

  const auto [status, answer] = prometheus->Get(
      "/api/v1/query_range", {{"query", kMetric}, {"start", start}, {"end", end}, {"step", "0.5"}});
  ASSERT_EQ(status, 200) << answer;
  const std::string answer_path = (dir / "answer.json").string();
  std::ofstream(answer_path) << answer;
  const nlohmann::json saved =
      JsonOf(Headroom(dir, Cat("analyze ", answer_path, " --json")), "saved answer");
  ASSERT_TRUE(saved.is_object());
  EXPECT_EQ(saved["format"], "prometheus answer");
  EXPECT_TRUE(saved.contains("resolution"));
  EXPECT_EQ(WithoutInput(saved), WithoutInput(from_csv));

  // fleet: the same job, 3 copies, from the file and from Prometheus (URL:COPIES).
  const std::string fleet_options = " --nameplate-w 700 --offsets none --trials 1 --json";
  const nlohmann::json fleet_csv =
      JsonOf(Headroom(dir, Cat("fleet ", csv_path, ":3", fleet_options)), "fleet csv");
  const nlohmann::json fleet_prometheus = JsonOf(
      Headroom(dir, Cat("fleet ", url, ":3", query, " --prometheus-max-points 7", fleet_options)),
      "fleet prometheus");
  ASSERT_TRUE(fleet_csv.is_object());
  EXPECT_EQ(fleet_csv["jobs"][0]["gpus"], kGpus);
  EXPECT_EQ(fleet_csv["jobs"][0]["copies"], 3);
  EXPECT_EQ(WithoutJobNames(fleet_prometheus), WithoutJobNames(fleet_csv));

  std::cout << "[ timing   ] Prometheus end to end: "
            << std::chrono::duration<double>(Clock::now() - started).count() << " s, "
            << exporter.scrapes() << " scrapes\n";
}

}  // namespace
