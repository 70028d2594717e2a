// `headroom diloco`: elastic low-communication training (docs/DILOCO.md). Its own executable,
// headroom-diloco, so that libtorch stays out of `headroom` (the agent above all): `headroom
// diloco ARGS` executes `headroom-diloco ARGS` from the same directory.
//
//   worker  one DiLoCo worker on an etcd run
//   ddp     one data-parallel worker (the baseline: fp32 gradients all-reduced every step)
//   eval    a checkpoint's validation loss and bits per byte
//   local   its own etcd and N worker processes on this machine, one summary
//
// Exit status: 0 success, 1 runtime or input error, 2 usage error.
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "cli/etcd_options.h"
#include "common/atomic_file.h"
#include "common/build_info.h"
#include "common/read_file.h"
#include "coord/batch_scheduler.h"
#include "coord/etcd_store.h"
#include "dist/checkpoint.h"
#include "dist/etcd_process.h"
#include "dist/fleet_power.h"
#include "dist/gloo_communicator.h"
#include "dist/lm_model.h"
#include "dist/replay.h"
#include "dist/worker.h"
#include "lm/corpus.h"
#include "lm/lm.h"
#include "report/diloco_report.h"

namespace {

using headroom::Error;
using headroom::Result;
using headroom::Status;
using nlohmann::json;
namespace dist = headroom::dist;
namespace lm = headroom::lm;

// A run's or a worker's name becomes part of etcd keys: 1-64 of [A-Za-z0-9._-] (a '/' would put
// one run's keys inside another's round; an empty one is no name).
CLI::Validator NameRule() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        auto st = headroom::coord::CheckName(text, "name");
        return st ? std::string() : st.error().message();
      },
      "NAME");
}

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr double kEtcdTimeoutS = 2.0;
constexpr double kLn2 = 0.69314718055994530942;

std::string SelfDir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

// The corpus scripts/setup.sh builds: build/corpus, next to build/bin; for the other build
// trees (build-asan, ...) the source tree's build/corpus.
std::string DefaultCorpus() {
  const std::string beside = SelfDir() + "/../corpus";
  if (std::filesystem::exists(beside + "/train.txt")) return beside;
  return std::string(HEADROOM_SOURCE_DIR) + "/build/corpus";
}

struct Args {
  std::string etcd;
  std::string data = DefaultCorpus();
  std::string out;
  std::string key_file;
  std::string compress = "int8";
  std::string hostile = "none";
  headroom::cli::EtcdOptions etcd_options;  // --etcd-cacert ... --etcd-password-file
  headroom::coord::EtcdCredentials credentials;
  headroom::coord::EtcdTls tls;
  bool json_out = false;
  // An opportunistic member of a site's coordinator (docs/DILOCO.md, "On spare power").
  std::string fleet;  // etcd://HOST:PORT[,HOST:PORT...]
  std::string site;
  std::string fleet_job;        // the member's name; default <run>.<name>
  std::string init_checkpoint;  // the run's starting model (a model.ckpt)
  dist::WorkerOptions w;
  lm::AdamWConfig adamw;  // the inner optimizer (the model's)
  int val_windows = 64;
};

// The byte-level model the worker options describe, on `corpus`.
dist::ModelFactory ModelOf(const Args& a, const lm::Corpus& corpus) {
  dist::LmModelOptions m;
  m.model = a.w.model;
  m.batch = a.w.batch;
  m.seq_len = a.w.seq_len;
  m.threads = a.w.threads;
  m.seed = a.w.seed;
  m.val_windows = a.val_windows;
  m.adamw = a.adamw;
  return dist::LmModelFactory(corpus, m);
}

void AddWorkerOptions(CLI::App& app, Args& a, bool need_etcd) {
  auto* etcd = app.add_option("--etcd", a.etcd, "etcd endpoints (http://127.0.0.1:2379,...)");
  if (need_etcd) etcd->required();
  headroom::cli::AddEtcdOptions(app, &a.etcd_options);
  app.add_option("--run", a.w.run, "The run's name (its keys in etcd)")
      ->check(NameRule())
      ->capture_default_str();
  app.add_option("--data", a.data, "Corpus directory (train.txt, val.txt)")->capture_default_str();
  app.add_option("--out", a.out, "Directory for the worker's JSON and the final checkpoint");
  app.add_option("--name", a.w.name,
                 "This worker's name in logs; it also seeds its data stream (default worker-PID)")
      ->check(NameRule());
  app.add_option("--model", a.w.model, "tiny or small")->capture_default_str();
  app.add_option("--inner-steps", a.w.inner_steps, "H: inner AdamW steps per outer round")
      ->capture_default_str();
  app.add_option("--rounds", a.w.rounds, "R: outer rounds")->capture_default_str();
  app.add_option("--outer-lr", a.w.outer.lr, "Outer SGD learning rate")->capture_default_str();
  app.add_option("--outer-momentum", a.w.outer.momentum, "Outer Nesterov momentum")
      ->capture_default_str();
  app.add_option("--inner-lr", a.adamw.lr, "Inner AdamW learning rate")->capture_default_str();
  app.add_option("--compress", a.compress, "Pseudo-gradients on the wire: int8 or none")
      ->capture_default_str();
  app.add_option("--batch", a.w.batch, "Windows per inner step")->capture_default_str();
  app.add_option("--seq-len", a.w.seq_len, "Bytes per window")->capture_default_str();
  app.add_option("--threads", a.w.threads, "libtorch threads")->capture_default_str();
  app.add_option("--key-file", a.key_file, "The run's HMAC key (default: the run's name)");
  app.add_option("--seed", a.w.seed, "Model initialisation and data")->capture_default_str();
  app.add_option("--lease-ttl-s", a.w.lease_ttl_s, "Membership lease")->capture_default_str();
  app.add_option("--collective-timeout-s", a.w.collective_timeout_s,
                 "A collective or a hash wait gives up after this")
      ->capture_default_str();
  app.add_option("--round-deadline-s", a.w.min_deadline_s,
                 "A round's group closes this long after a member arrives (at least)")
      ->capture_default_str();
  app.add_option("--start-workers", a.w.start_workers,
                 "Round 0 waits for this many members (up to the deadline)")
      ->capture_default_str();
  app.add_option("--val-windows", a.val_windows, "Validation windows")->capture_default_str();
  app.add_option("--eval-every", a.w.eval_every, "Rounds between validation losses")
      ->capture_default_str();
  app.add_option("--cpu-watts-per-core", a.w.cpu_watts_per_core,
                 "Energy estimate: watts per busy core")
      ->capture_default_str();
  app.add_option("--network-j-per-byte", a.w.network_j_per_byte,
                 "Energy estimate: joules per byte sent (0.06 kWh/GB, Aslan et al. 2018)")
      ->capture_default_str();
  app.add_option("--hostile", a.hostile,
                 "Fault injection: none, scale, flip, nan, forge (in `local`: worker-0 only)")
      ->capture_default_str();
  app.add_option("--hostile-from-round", a.w.hostile_from_round, "From this round on")
      ->capture_default_str();
  app.add_option("--fleet", a.fleet,
                 "Train on a site's spare power: its etcd, etcd://HOST:PORT[,...] (with --site)");
  app.add_option("--site", a.site, "The site whose coordinator grants the watts");
  app.add_option("--fleet-job", a.fleet_job, "The worker's name at the site (default RUN.NAME)");
  app.add_option("--init-checkpoint", a.init_checkpoint,
                 "Start from this model.ckpt instead of the seed's initialisation");
  app.add_flag("--json", a.json_out, "Print the summary as JSON");
}

Status Resolve(Args& a, const std::string& mode) {
  a.w.mode = mode;
  auto codec = dist::ParseCodec(a.compress);
  if (!codec) return codec.error();
  a.w.codec = *codec;
  auto h = dist::ParseHostility(a.hostile);
  if (!h) return h.error();
  a.w.hostility = *h;
  if (!a.key_file.empty()) {
    auto read = headroom::ReadFileCapped(a.key_file, headroom::kMaxSmallFileBytes, "--key-file");
    if (!read) return read.error();
    std::string key = std::move(*read);
    while (!key.empty() && (key.back() == '\n' || key.back() == '\r')) key.pop_back();
    if (key.size() < 16) return Error::Input(a.key_file + ": a key of at least 16 bytes, please");
    a.w.key.assign(key.begin(), key.end());
  }
  auto credentials =
      headroom::coord::ReadEtcdCredentials(a.etcd_options.user, a.etcd_options.password_file);
  if (!credentials) return credentials.error();
  a.credentials = *credentials;
  a.tls = {a.etcd_options.cacert, a.etcd_options.cert, a.etcd_options.key};
  if (a.fleet.empty() != a.site.empty()) return Error::Usage("--fleet and --site go together");
  if (!a.fleet.empty()) {
    if (!(a.fleet.starts_with("etcd://") && a.fleet.size() > 7) &&
        !(a.fleet.starts_with("etcds://") && a.fleet.size() > 8)) {
      return Error::Usage("--fleet '" + a.fleet +
                          "': expected etcd://HOST:PORT[,HOST:PORT...] (etcds:// with TLS)");
    }
    if (auto st = headroom::coord::CheckName(a.site, "--site"); !st) return st;
    if (!a.fleet_job.empty()) {
      if (auto st = headroom::coord::CheckName(a.fleet_job, "--fleet-job"); !st) return st;
    }
  }
  if (!a.init_checkpoint.empty()) {
    auto c = dist::ReadCheckpoint(a.init_checkpoint);
    if (!c) return c.error();
    if (c->model != a.w.model) {
      return Error::Input(a.init_checkpoint + ":2: field 'model': '" + c->model +
                          "', not the run's --model '" + a.w.model + "'");
    }
    a.w.init_parameters = std::move(c->parameters);
  }
  if (a.w.threads < 1 || a.w.threads > 256) return Error::Usage("--threads: 1 to 256");
  if (a.w.lease_ttl_s < 2 || a.w.lease_ttl_s > 60) return Error::Usage("--lease-ttl-s: 2 to 60");
  if (a.w.collective_timeout_s <= 0) return Error::Usage("--collective-timeout-s: positive");
  if (a.w.batch > 4096 || a.w.inner_steps > 1000000 || a.w.rounds > 1000000) {
    return Error::Usage("--batch, --inner-steps or --rounds: too large");
  }
  return headroom::OkStatus();
}

double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

dist::WorkerClock RealClock() {
  const auto t0 = std::chrono::steady_clock::now();
  return {
      [t0] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); },
      CpuSeconds,
      [](double s) {
        std::this_thread::sleep_for(std::chrono::microseconds(static_cast<long>(s * 1e6)));
      }};
}

// The summary of the keys, for one worker's view or for a whole run.
json Summary(const std::string& run, const std::string& mode, int workers, int rounds,
             int inner_steps, std::uint64_t tokens, double final_val_loss, std::uint64_t bytes_sent,
             int membership_changes, int evictions, bool hashes_agreed, double overhead,
             double compute_j, double coordination_j, const std::vector<dist::LossPoint>& curve) {
  json c = json::array();
  for (const auto& p : curve) c.push_back({{"tokens", p.tokens}, {"val_loss", p.val_loss}});
  return {{"run", run},
          {"mode", mode},
          {"workers", workers},
          {"rounds", rounds},
          {"inner_steps", inner_steps},
          {"tokens", tokens},
          {"final_val_loss", final_val_loss},
          {"val_bits_per_byte", final_val_loss / kLn2},
          {"bytes_sent_total", bytes_sent},
          {"membership_changes", membership_changes},
          {"evictions", evictions},
          {"hashes_agreed", hashes_agreed},
          {"overhead_fraction", overhead},
          {"energy_j", {{"compute", compute_j}, {"coordination", coordination_j}}},
          {"loss_curve", c}};
}

json WorkerJson(const dist::WorkerReport& r, const dist::WorkerOptions& o) {
  const double compute_j = r.compute_cpu_s * o.cpu_watts_per_core;
  const double coord_j = r.other_cpu_s * o.cpu_watts_per_core +
                         static_cast<double>(r.traffic.bytes_sent) * o.network_j_per_byte;
  // Idle on purpose (a duty cycle, asked to leave) is neither computing nor overhead.
  const double busy_s = r.wall_s - r.throttled_s;
  const double overhead = busy_s > 0 ? 1.0 - r.compute_s / busy_s : 0.0;
  json j = Summary(o.run, r.mode, 1, r.rounds_done, o.inner_steps, r.tokens, r.final_val_loss,
                   r.traffic.bytes_sent, r.membership_changes, r.evictions, r.hashes_agreed,
                   overhead, compute_j, coord_j, r.loss_curve);
  j["worker"] = {{"name", r.name},
                 {"member", r.member},
                 {"rounds_contributed", r.rounds_contributed},
                 {"resyncs", r.resyncs},
                 {"leaves", r.leaves},
                 {"bytes_received", r.traffic.bytes_received},
                 {"seconds",
                  {{"compute", r.compute_s},
                   {"communicate", r.communicate_s},
                   {"wait", r.wait_s},
                   {"recover", r.recover_s},
                   {"throttled", r.throttled_s},
                   {"wall", r.wall_s}}},
                 {"cpu_seconds", {{"compute", r.compute_cpu_s}, {"other", r.other_cpu_s}}},
                 {"log", r.log}};
  return j;
}

Status RunWorkerCommand(Args& a, const std::string& mode) {
  if (auto s = Resolve(a, mode); !s) return s;
  auto corpus = lm::LoadCorpus(a.data, static_cast<std::size_t>(a.w.seq_len) + 1);
  if (!corpus) return corpus.error();
  auto store = headroom::coord::EtcdStore::Open(a.etcd, kEtcdTimeoutS, a.credentials, a.tls);
  if (!store) return store.error();
  headroom::coord::Store& st = **store;
  dist::CommFactory comm = [&st](const std::string& prefix, int rank, int size, double timeout_s) {
    dist::GlooOptions g;
    g.prefix = prefix;
    g.rank = rank;
    g.size = size;
    g.timeout_s = timeout_s;
    return dist::ConnectGloo(st, g);
  };
  // On a site's spare power: an opportunistic member of its coordinator, on the site's etcd.
  std::unique_ptr<headroom::coord::EtcdStore> fleet_store;
  std::unique_ptr<dist::FleetPower> power;
  if (!a.fleet.empty()) {
    // The site's etcd: plain (etcd://), or with the same TLS and user as the run's (etcds://).
    const bool site_tls = a.fleet.starts_with("etcds://");
    auto fs = headroom::coord::EtcdStore::Open(
        a.fleet, kEtcdTimeoutS, site_tls ? a.credentials : headroom::coord::EtcdCredentials{},
        site_tls ? a.tls : headroom::coord::EtcdTls{});
    if (!fs) return fs.error();
    fleet_store = std::move(*fs);
    dist::FleetPowerConfig fc;
    fc.site = a.site;
    fc.job =
        a.fleet_job.empty()
            ? a.w.run + "." + (a.w.name.empty() ? fmt::format("worker-{}", getpid()) : a.w.name)
            : a.fleet_job;
    if (auto bad = headroom::coord::CheckName(fc.job, "--fleet-job"); !bad) return bad;
    fc.threads = a.w.threads;
    fc.watts_per_core = a.w.cpu_watts_per_core;
    // Run by Slurm: the job id, so that a coordinator with --slurm suspends and resumes it.
    if (const char* job = std::getenv("SLURM_JOB_ID"); job != nullptr && *job != '\0') {
      if (headroom::coord::IsSlurmJobId(job)) {
        fc.slurm_job = job;
      } else {
        std::fprintf(stderr, "headroom diloco: SLURM_JOB_ID '%s' is not a job id; ignored\n", job);
      }
    }
    const auto t0 = std::chrono::steady_clock::now();
    power = std::make_unique<dist::FleetPower>(
        *fleet_store, fc,
        [t0] {
          return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        },
        [](const std::string& line) {
          std::fprintf(stderr, "headroom diloco: fleet: %s\n", line.c_str());
        });
    a.w.granted_duty = [&power](int threads, double duty) {
      return power->GrantedDuty(threads, duty);
    };
    a.w.computing = [&power](bool computing) { power->SetComputing(computing); };
  }
  const dist::ModelFactory model = ModelOf(a, *corpus);
  auto report = dist::RunWorker(st, comm, model, a.w, RealClock());
  power.reset();  // leaves the site
  if (!report) return report.error();
  json j = WorkerJson(*report, a.w);
  if (!a.out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(a.out, ec);
    if (!report->final_params.empty()) {
      dist::Checkpoint c{a.w.model, a.w.rounds - 1, 0, report->final_params};
      if (auto w = dist::WriteCheckpoint(a.out + "/model.ckpt", c); !w) return w;
      j["checkpoint"] = a.out + "/model.ckpt";
    }
    if (auto w =
            headroom::WriteFileAtomically(a.out + "/" + report->name + ".json", j.dump(2) + "\n");
        !w) {
      return w;
    }
  }
  if (a.json_out) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf(
        "%s: %d rounds (%d contributed), %llu tokens, %.1f s (compute %.1f s), sent %llu "
        "bytes, val loss %.4f\n",
        report->name.c_str(), report->rounds_done, report->rounds_contributed,
        static_cast<unsigned long long>(report->tokens), report->wall_s, report->compute_s,
        static_cast<unsigned long long>(report->traffic.bytes_sent), report->final_val_loss);
  }
  return headroom::OkStatus();
}

// `replay`: the run's arithmetic for a membership schedule, in one process (dist/replay.h).
Status RunReplay(Args& a, const std::string& schedule_path, int workers) {
  if (auto s = Resolve(a, "diloco"); !s) return s;
  auto read = headroom::ReadFileCapped(schedule_path, headroom::kMaxDataFileBytes, "--schedule");
  if (!read) return read.error();
  const std::string text = std::move(*read);
  auto members = dist::ParseMembershipSchedule(text, schedule_path);
  if (!members) return members.error();
  auto corpus = lm::LoadCorpus(a.data, static_cast<std::size_t>(a.w.seq_len) + 1);
  if (!corpus) return corpus.error();
  dist::ReplayOptions o;
  o.worker = a.w;
  o.workers = workers;
  o.members = *members;
  if (a.w.rounds > 0 && static_cast<size_t>(a.w.rounds) < o.members.size()) {
    o.members.resize(static_cast<size_t>(a.w.rounds));
  }
  auto r = dist::ReplayRun(ModelOf(a, *corpus), o, [](int done, int total) {
    std::fprintf(stderr, "\rheadroom diloco replay: round %d of %d", done, total);
    if (done == total) std::fprintf(stderr, "\n");
  });
  if (!r) return r.error();
  double mean_members = 0.0;
  for (int m : o.members) mean_members += std::min(m, workers);
  mean_members /= static_cast<double>(o.members.size());
  json curve = json::array();
  for (const auto& p : r->loss_curve)
    curve.push_back({{"tokens", p.tokens}, {"val_loss", p.val_loss}});
  const json out{{"schedule", schedule_path},
                 {"workers", workers},
                 {"rounds", r->rounds},
                 {"inner_steps", a.w.inner_steps},
                 {"mean_members", mean_members},
                 {"tokens", r->tokens},
                 {"resyncs", r->resyncs},
                 {"final_val_loss", r->final_val_loss},
                 {"val_bits_per_byte", r->final_val_loss / std::log(2.0)},
                 {"loss_curve", curve}};
  if (a.json_out) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf(
        "replay of %s: %d rounds, %d workers at most (mean %.2f), H = %d\n"
        "  tokens %llu, resyncs %d, final val loss %.4f nats/byte (%.3f bits/byte)\n",
        schedule_path.c_str(), r->rounds, workers, mean_members, a.w.inner_steps,
        static_cast<unsigned long long>(r->tokens), r->resyncs, r->final_val_loss,
        r->final_val_loss / std::log(2.0));
  }
  return headroom::OkStatus();
}

Status RunEval(const std::string& checkpoint, const std::string& data, int windows, int seq_len,
               bool json_out) {
  auto c = dist::ReadCheckpoint(checkpoint);
  if (!c) return c.error();
  lm::ModelConfig config;
  try {
    config = lm::ModelByName(c->model);
  } catch (const std::invalid_argument& e) {
    return Error::Input(checkpoint + ":2: field 'model': " + e.what());
  }
  auto corpus = lm::LoadCorpus(data, static_cast<std::size_t>(seq_len) + 1);
  if (!corpus) return corpus.error();
  lm::ByteLm model(config, {}, 1, 1);
  if (model.parameter_count() != c->parameters.size()) {
    return Error::Input(checkpoint + ":2: field 'parameters': not model " + c->model + "'s");
  }
  model.SetParameters(c->parameters);
  const double loss =
      lm::ValidationLoss(model, lm::ValidationBatches(corpus->val, windows, 16, seq_len));
  if (!std::isfinite(loss)) {
    return Error::Input(
        fmt::format("{}: the validation loss is {}: not a usable model", checkpoint, loss));
  }
  if (json_out) {
    std::printf("%s\n", json{{"checkpoint", checkpoint},
                             {"model", c->model},
                             {"val_loss", loss},
                             {"val_bits_per_byte", loss / kLn2},
                             {"windows", windows}}
                            .dump(2)
                            .c_str());
  } else {
    std::printf("%s: validation loss %.4f nats/byte, %.4f bits/byte (%d windows of %d)\n",
                checkpoint.c_str(), loss, loss / kLn2, windows, seq_len);
  }
  return headroom::OkStatus();
}

// The worker command line that reproduces a's settings.
std::vector<std::string> WorkerArgv(const Args& a, const std::string& mode, const std::string& url,
                                    const std::string& name, const std::string& out,
                                    int start_workers, bool hostile) {
  const auto& w = a.w;
  std::vector<std::string> v = {SelfDir() + "/headroom-diloco",
                                mode == "ddp" ? "ddp" : "worker",
                                "--etcd",
                                url,
                                "--run",
                                w.run,
                                "--data",
                                a.data,
                                "--out",
                                out,
                                "--name",
                                name,
                                "--json"};
  const auto add = [&v](const char* flag, const std::string& value) {
    v.push_back(flag);
    v.push_back(value);
  };
  add("--model", w.model);
  add("--inner-steps", std::to_string(w.inner_steps));
  add("--rounds", std::to_string(w.rounds));
  add("--outer-lr", fmt::format("{}", w.outer.lr));
  add("--outer-momentum", fmt::format("{}", w.outer.momentum));
  add("--inner-lr", fmt::format("{}", a.adamw.lr));
  add("--compress", a.compress);
  add("--batch", std::to_string(w.batch));
  add("--seq-len", std::to_string(w.seq_len));
  add("--threads", std::to_string(w.threads));
  if (!a.key_file.empty()) add("--key-file", a.key_file);
  if (!a.init_checkpoint.empty()) add("--init-checkpoint", a.init_checkpoint);
  const headroom::cli::EtcdOptions& eo = a.etcd_options;
  for (const auto& [flag, value] :
       {std::pair{"--etcd-user", eo.user}, std::pair{"--etcd-password-file", eo.password_file},
        std::pair{"--etcd-cacert", eo.cacert}, std::pair{"--etcd-cert", eo.cert},
        std::pair{"--etcd-key", eo.key}}) {
    if (!value.empty()) add(flag, value);
  }
  add("--seed", std::to_string(w.seed));
  add("--lease-ttl-s", fmt::format("{}", w.lease_ttl_s));
  add("--collective-timeout-s", fmt::format("{}", w.collective_timeout_s));
  add("--round-deadline-s", fmt::format("{}", w.min_deadline_s));
  add("--start-workers", std::to_string(start_workers));
  add("--val-windows", std::to_string(a.val_windows));
  add("--eval-every", std::to_string(w.eval_every));
  add("--cpu-watts-per-core", fmt::format("{}", w.cpu_watts_per_core));
  add("--network-j-per-byte", fmt::format("{}", w.network_j_per_byte));
  if (!a.fleet.empty()) {
    add("--fleet", a.fleet);
    add("--site", a.site);  // each worker's name at the site: RUN.NAME, the default
  }
  if (hostile) {
    add("--hostile", a.hostile);
    add("--hostile-from-round", std::to_string(w.hostile_from_round));
  }
  return v;
}

struct Child {
  std::string name;
  pid_t pid = -1;
  bool killed = false;
  bool done = false;
  int status = 0;
};

Result<pid_t> Spawn(const std::vector<std::string>& argv, const std::string& out_dir,
                    const std::string& name) {
  const std::string log = out_dir + "/" + name + ".log";
  const std::string stdout_path = out_dir + "/" + name + ".stdout";
  const pid_t pid = fork();
  if (pid < 0) return Error::Io(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    const int o = open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o >= 0) dup2(o, 1);
    if (e >= 0) dup2(e, 2);
    std::vector<std::string> copy = argv;
    std::vector<char*> cargv;
    for (auto& s : copy) cargv.push_back(s.data());
    cargv.push_back(nullptr);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  return pid;
}

struct Churn {
  int kill_at_round = -1;
  int join_at_round = -1;
};

Result<Churn> ParseChurn(const std::string& text) {
  Churn c;
  if (text.empty()) return c;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    const auto colon = part.find(':');
    const std::string what = part.substr(0, colon);
    int round = -1;
    try {
      if (colon == std::string::npos) throw std::invalid_argument("no round");
      std::size_t used = 0;
      round = std::stoi(part.substr(colon + 1), &used);
      if (used != part.size() - colon - 1 || round < 1) throw std::invalid_argument("bad");
    } catch (const std::exception&) {
      return Error::Usage("--churn: '" + part +
                          "': expected kill-at-round:R or join-at-round:R, R >= 1");
    }
    if (what == "kill-at-round") {
      c.kill_at_round = round;
    } else if (what == "join-at-round") {
      c.join_at_round = round;
    } else {
      return Error::Usage("--churn: '" + what + "' is not kill-at-round or join-at-round");
    }
  }
  if (c.join_at_round >= 0 && c.kill_at_round >= 0 && c.join_at_round <= c.kill_at_round) {
    return Error::Usage("--churn: join-at-round must come after kill-at-round");
  }
  return c;
}

// The last round with an agreed model, and when each first appeared (seconds since start).
int LastAgreed(headroom::coord::Store& store, const std::string& run) {
  auto r = store.Get(dist::RunPrefix(run) + "rounds/", true);
  if (!r) return -1;
  int last = -1;
  for (const auto& kv : r->kvs) {
    if (!kv.key.ends_with("/agreed")) continue;
    const auto slash = kv.key.rfind('/', kv.key.size() - 8);
    last = std::max(last, std::atoi(kv.key.substr(slash + 1, 8).c_str()));
  }
  return last;
}

Status RunLocal(Args& a, int workers, const std::string& mode, const std::string& churn_text) {
  if (auto s = Resolve(a, mode); !s) return s;
  if (workers < 1 || workers > 64) return Error::Usage("--workers: 1 to 64");
  // What each worker would refuse, refused here before anything starts.
  if (mode != "diloco" && mode != "ddp")
    return Error::Usage("--mode: '" + mode + "' is not diloco or ddp");
  if (a.w.inner_steps < 1 || a.w.rounds < 1 || a.w.batch < 1 || a.w.seq_len < 1) {
    return Error::Usage("--inner-steps, --rounds, --batch and --seq-len must be at least 1");
  }
  try {
    const lm::ModelConfig config = lm::ModelByName(a.w.model);
    if (a.w.seq_len > config.max_seq_len) {
      return Error::Usage(fmt::format("--seq-len {} is longer than model {}'s {}", a.w.seq_len,
                                      a.w.model, config.max_seq_len));
    }
  } catch (const std::invalid_argument& e) {
    return Error::Usage(e.what());
  }
  auto churn = ParseChurn(churn_text);
  if (!churn) return churn.error();
  if (mode == "ddp" && churn->kill_at_round >= 0) {
    return Error::Usage("--churn: the ddp baseline is not elastic");
  }
  if (churn->kill_at_round >= a.w.rounds || churn->join_at_round >= a.w.rounds) {
    return Error::Usage("--churn: rounds beyond --rounds");
  }
  auto corpus = lm::LoadCorpus(a.data, static_cast<std::size_t>(a.w.seq_len) + 1);
  if (!corpus) return corpus.error();
  std::unique_ptr<dist::EtcdProcess> etcd;
  std::string url = a.etcd;
  if (url.empty()) {
    auto e = dist::EtcdProcess::Start();
    if (!e) return e.error();
    etcd = std::move(*e);
    url = etcd->url();
  }
  std::string out = a.out;
  if (out.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "headroom-diloco-XXXXXX").string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) == nullptr)
      return Error::Io("mkdtemp: " + std::string(std::strerror(errno)));
    out = buf.data();
  }
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  auto store_r = headroom::coord::EtcdStore::Open(url, kEtcdTimeoutS, a.credentials, a.tls);
  if (!store_r) return store_r.error();
  auto& store = **store_r;

  std::vector<Child> children;
  const auto kill_all = [&children] {
    for (auto& c : children) {
      if (!c.done && c.pid > 0) {
        kill(c.pid, SIGKILL);
        waitpid(c.pid, nullptr, 0);
        c.done = true;
      }
    }
  };
  for (int i = 0; i < workers; ++i) {
    const std::string name = fmt::format("worker-{}", i);
    // In `local`, --hostile makes worker-0 the hostile one.
    auto pid = Spawn(WorkerArgv(a, mode, url, name, out, workers, i == 0), out, name);
    if (!pid) {
      kill_all();
      return pid.error();
    }
    children.push_back({name, *pid});
  }
  std::mt19937_64 rng(a.w.seed * 7919 + 17);
  const auto t0 = std::chrono::steady_clock::now();
  const auto now_s = [&t0] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::map<int, double> agreed_at;  // round -> when it was first seen agreed
  double killed_at = -1, stall_limit_s = 600;
  int killed_round = -1, joined_round = -1;
  std::string killed_name;
  int shown = -2;
  double last_progress = now_s();
  while (true) {
    // Reap.
    bool all_done = true;
    for (auto& c : children) {
      if (c.done) continue;
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.done = true;
        c.status = status;
      } else {
        all_done = false;
      }
    }
    if (all_done) break;
    const int last = LastAgreed(store, a.w.run);
    if (last > shown && last >= 0) {
      for (int r = std::max(shown + 1, 0); r <= last; ++r) agreed_at[r] = now_s();
      shown = last;
      last_progress = now_s();
      std::fprintf(stderr, "diloco local: round %d/%d done (%.1f s)\n", last + 1, a.w.rounds,
                   now_s());
    }
    // Churn: SIGKILL a worker during round R (at a random point of its expected time), and a
    // fresh one during round R2.
    if (churn->kill_at_round >= 0 && killed_at < 0 && last >= churn->kill_at_round - 1) {
      const double round_s = agreed_at.size() >= 2
                                 ? (agreed_at.rbegin()->second - agreed_at.begin()->second) /
                                       static_cast<double>(agreed_at.size() - 1)
                                 : 1.0;
      std::uniform_real_distribution<double> frac(0.2, 0.8);
      const double wait = frac(rng) * round_s;
      std::this_thread::sleep_for(std::chrono::microseconds(static_cast<long>(wait * 1e6)));
      std::vector<std::size_t> alive;
      for (std::size_t i = 0; i < children.size(); ++i) {
        if (!children[i].done) alive.push_back(i);
      }
      if (!alive.empty()) {
        Child& victim = children[alive[rng() % alive.size()]];
        kill(victim.pid, SIGKILL);
        victim.killed = true;
        killed_at = now_s();
        killed_round = LastAgreed(store, a.w.run) + 1;
        killed_name = victim.name;
        std::fprintf(stderr, "diloco local: SIGKILL %s during round %d (%.1f s)\n",
                     victim.name.c_str(), killed_round, killed_at);
      }
    }
    if (churn->join_at_round >= 0 && joined_round < 0 && last >= churn->join_at_round - 1) {
      const std::string name = fmt::format("worker-{}", children.size());
      auto pid = Spawn(WorkerArgv(a, mode, url, name, out, 1, false), out, name);
      if (!pid) {
        kill_all();
        return pid.error();
      }
      children.push_back({name, *pid});
      joined_round = last + 1;
      std::fprintf(stderr, "diloco local: %s joins during round %d (%.1f s)\n", name.c_str(),
                   joined_round, now_s());
    }
    if (now_s() - last_progress > stall_limit_s) {
      kill_all();
      return Error::Io(
          fmt::format("no round completed in {:.0f} s (logs in {})", stall_limit_s, out));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double wall_s = now_s();
  // Every worker not killed on purpose must have ended well.
  for (const auto& c : children) {
    if (c.killed) continue;
    if (!WIFEXITED(c.status) || WEXITSTATUS(c.status) != 0) {
      std::ifstream f(out + "/" + c.name + ".log");
      std::string last_line, line;
      while (std::getline(f, line)) {
        if (!line.empty()) last_line = line;
      }
      return Error::Io(
          fmt::format("{} failed ({}): {}", c.name, out + "/" + c.name + ".log", last_line));
    }
  }
  auto summary = dist::ReadRunSummary(store, a.w.run);
  if (!summary) return summary.error();
  std::uint64_t bytes = 0;
  double compute_s = 0, wall_sum = 0, compute_cpu = 0, other_cpu = 0;
  int reports = 0;
  json per_worker = json::array();
  for (const auto& c : children) {
    if (c.killed) continue;
    std::ifstream f(out + "/" + c.name + ".json");
    auto j = json::parse(f, nullptr, false);
    if (j.is_discarded()) continue;
    ++reports;
    bytes += j.value("bytes_sent_total", std::uint64_t{0});
    compute_s += j["worker"]["seconds"].value("compute", 0.0);
    wall_sum +=
        j["worker"]["seconds"].value("wall", 0.0) - j["worker"]["seconds"].value("throttled", 0.0);
    compute_cpu += j["worker"]["cpu_seconds"].value("compute", 0.0);
    other_cpu += j["worker"]["cpu_seconds"].value("other", 0.0);
    per_worker.push_back({{"name", c.name},
                          {"seconds", j["worker"]["seconds"]},
                          {"bytes_sent", j.value("bytes_sent_total", std::uint64_t{0})},
                          {"rounds_contributed", j["worker"].value("rounds_contributed", 0)},
                          {"resyncs", j["worker"].value("resyncs", 0)},
                          {"leaves", j["worker"].value("leaves", 0)}});
  }
  const double final_loss =
      summary->loss_curve.empty() ? -1.0 : summary->loss_curve.back().val_loss;
  const double compute_j = compute_cpu * a.w.cpu_watts_per_core;
  const double coord_j =
      other_cpu * a.w.cpu_watts_per_core + static_cast<double>(bytes) * a.w.network_j_per_byte;
  json j =
      Summary(a.w.run, mode, workers, summary->rounds, a.w.inner_steps, summary->tokens, final_loss,
              bytes, summary->membership_changes, summary->rejected + summary->hash_evictions,
              summary->hashes_agreed, wall_sum > 0 ? 1.0 - compute_s / wall_sum : 0.0, compute_j,
              coord_j, summary->loss_curve);
  j["wall_s"] = wall_s;
  json done_at = json::array();
  for (const auto& [r, t] : agreed_at) done_at.push_back(t);
  j["rounds_done_at_s"] = done_at;
  j["out"] = out;
  j["workers_detail"] = per_worker;
  if (std::filesystem::exists(out + "/model.ckpt")) j["checkpoint"] = out + "/model.ckpt";
  if (killed_at >= 0) {
    // How long the run took to go on: from the kill to the next agreed round, against the
    // median round before it.
    double next = -1;
    for (const auto& [r, t] : agreed_at) {
      if (t > killed_at) {
        next = t - killed_at;
        break;
      }
    }
    j["churn"] = {{"killed", killed_name},
                  {"killed_in_round", killed_round},
                  {"next_round_after_s", next},
                  {"joined_in_round", joined_round}};
  }
  if (auto w = headroom::WriteFileAtomically(out + "/summary.json", j.dump(2) + "\n"); !w) return w;
  if (auto w = headroom::WriteFileAtomically(out + "/report.html",
                                             headroom::report::DilocoReportHtml(j));
      !w) {
    return w;
  }
  if (a.json_out) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("diloco local (%s): %d workers, %d rounds x %d inner steps, %llu tokens\n",
                mode.c_str(), workers, summary->rounds, a.w.inner_steps,
                static_cast<unsigned long long>(summary->tokens));
    std::printf("  validation loss   %.4f nats/byte (%.4f bits/byte)\n", final_loss,
                final_loss / kLn2);
    std::printf("  bytes sent        %llu\n", static_cast<unsigned long long>(bytes));
    std::printf("  overhead          %.1f %% of wall time not computing\n",
                100.0 * (wall_sum > 0 ? 1.0 - compute_s / wall_sum : 0.0));
    std::printf("  membership        %d changes, %d evictions, hashes %s\n",
                summary->membership_changes, summary->rejected + summary->hash_evictions,
                summary->hashes_agreed ? "agreed every round" : "DISAGREED");
    std::printf("  energy            %.0f J compute, %.0f J coordination\n", compute_j, coord_j);
    std::printf("report: %s/report.html (summary.json beside it)\n", out.c_str());
  }
  return headroom::OkStatus();
}

// `control`: what a worker is asked at run time (docs/DILOCO.md, "Control"), merged into its
// control/<name> key.
struct ControlArgs {
  std::string etcd;
  std::string run = "default";
  std::string worker;
  int threads = 0;
  double duty = -1;
  bool leave = false;
  bool rejoin = false;
  headroom::cli::EtcdOptions etcd_options;
};

Status RunControl(const ControlArgs& c) {
  if (c.leave && c.rejoin) return Error::Usage("--leave and --rejoin: one or the other");
  if (c.threads != 0 && (c.threads < 1 || c.threads > 256)) {
    return Error::Usage("--threads: 1 to 256");
  }
  if (c.duty != -1 && (c.duty <= 0 || c.duty > 1)) return Error::Usage("--duty: in (0, 1]");
  auto credentials =
      headroom::coord::ReadEtcdCredentials(c.etcd_options.user, c.etcd_options.password_file);
  if (!credentials) return credentials.error();
  auto store = headroom::coord::EtcdStore::Open(
      c.etcd, kEtcdTimeoutS, *credentials,
      {c.etcd_options.cacert, c.etcd_options.cert, c.etcd_options.key});
  if (!store) return store.error();
  const std::string key = dist::RunPrefix(c.run) + "control/" + c.worker;
  auto old = (*store)->Get(key);
  if (!old) return old.error();
  json j = json::object();
  if (!old->kvs.empty()) {
    j = json::parse(old->kvs[0].value, nullptr, false);
    if (j.is_discarded() || !j.is_object()) j = json::object();
  }
  if (c.threads != 0) j["threads"] = c.threads;
  if (c.duty != -1) j["duty"] = c.duty;
  if (c.leave) j["leave"] = true;
  if (c.rejoin) j["leave"] = false;
  if (auto p = (*store)->Put(key, j.dump()); !p) return p.error();
  std::printf("%s %s\n", key.c_str(), j.dump().c_str());
  return headroom::OkStatus();
}

// One line on stderr: newlines and other control bytes become spaces (as `headroom` prints).
void PrintError(std::string message) {
  for (char& ch : message) {
    if (static_cast<unsigned char>(ch) < 0x20) ch = ' ';
  }
  std::fprintf(stderr, "headroom: error: diloco: %s\n", message.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"headroom diloco: elastic low-communication training on etcd and Gloo"};
  app.set_version_flag("--version", fmt::format("headroom-diloco {} (commit {})",
                                                headroom::Version(), headroom::Commit()));
  app.require_subcommand(1);
  Args worker_args, ddp_args, local_args;
  auto* worker = app.add_subcommand("worker", "One DiLoCo worker of a run on etcd");
  AddWorkerOptions(*worker, worker_args, true);
  auto* ddp = app.add_subcommand("ddp", "One data-parallel worker (the baseline)");
  AddWorkerOptions(*ddp, ddp_args, true);
  auto* eval = app.add_subcommand("eval", "A checkpoint's validation loss and bits per byte");
  std::string checkpoint, eval_data = DefaultCorpus();
  int eval_windows = 256, eval_seq = 128;
  bool eval_json = false;
  eval->add_option("--checkpoint", checkpoint, "model.ckpt of a run")->required();
  eval->add_option("--data", eval_data, "Corpus directory")->capture_default_str();
  eval->add_option("--val-windows", eval_windows, "Validation windows")->capture_default_str();
  eval->add_option("--seq-len", eval_seq, "Bytes per window")->capture_default_str();
  eval->add_flag("--json", eval_json, "JSON");
  auto* control = app.add_subcommand("control", "Ask a worker, at run time: threads, duty, leave");
  ControlArgs control_args;
  control->add_option("--etcd", control_args.etcd, "etcd endpoints")->required();
  control->add_option("--run", control_args.run, "The run")
      ->check(NameRule())
      ->capture_default_str();
  control->add_option("--worker", control_args.worker, "The worker's --name")
      ->check(NameRule())
      ->required();
  control->add_option("--threads", control_args.threads, "libtorch threads");
  control->add_option("--duty", control_args.duty, "Fraction of time computing, (0, 1]");
  control->add_flag("--leave", control_args.leave, "Leave at the next round boundary");
  control->add_flag("--rejoin", control_args.rejoin, "Come back (through a donor)");
  headroom::cli::AddEtcdOptions(*control, &control_args.etcd_options);
  auto* replay = app.add_subcommand(
      "replay", "A run's arithmetic for a membership schedule (round,workers), in one process");
  Args replay_args;
  std::string replay_schedule;
  int replay_workers = 4;
  replay->add_option("--schedule", replay_schedule, "round,workers CSV (sites-sim --schedule-dir)")
      ->required();
  replay->add_option("--workers", replay_workers, "Replicas (a round's members are the first k)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  replay_args.w.rounds = 0;  // all of the schedule
  AddWorkerOptions(*replay, replay_args, false);
  auto* local = app.add_subcommand("local", "Its own etcd and N worker processes, one summary");
  int local_workers = 4;
  std::string local_mode = "diloco", churn;
  local->add_option("--workers", local_workers, "Worker processes")->capture_default_str();
  local->add_option("--mode", local_mode, "diloco or ddp")->capture_default_str();
  local->add_option("--churn", churn, "kill-at-round:R[,join-at-round:R2]");
  local_args.w.inner_steps = 20;
  local_args.w.rounds = 5;
  AddWorkerOptions(*local, local_args, false);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      app.exit(e);
      return kExitOk;
    }
    if (app.get_subcommands().empty()) {  // no command given: name them
      std::vector<std::string> names;
      for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
      PrintError(
          fmt::format("needs a command: {} (headroom diloco --help)", fmt::join(names, ", ")));
      return kExitUsage;
    }
    PrintError(e.what());
    return kExitUsage;
  }
  Status st = headroom::OkStatus();
  try {
    if (worker->parsed()) st = RunWorkerCommand(worker_args, "diloco");
    if (ddp->parsed()) st = RunWorkerCommand(ddp_args, "ddp");
    if (control->parsed()) st = RunControl(control_args);
    if (eval->parsed()) st = RunEval(checkpoint, eval_data, eval_windows, eval_seq, eval_json);
    if (replay->parsed()) st = RunReplay(replay_args, replay_schedule, replay_workers);
    if (local->parsed()) {
      st = RunLocal(local_args, local_workers, local_mode, churn);
    }
  } catch (const std::exception& e) {
    st = Error::Io(e.what());
  }
  if (st) return kExitOk;
  PrintError(st.error().message());
  return st.error().kind() == headroom::ErrorKind::kUsage ? kExitUsage : kExitError;
}
