#include "diloco_cli/diloco_args.h"

#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "cli_main/renamed_options.h"
#include "common/read_file.h"
#include "coord/layout.h"
#include "diloco/stream.h"
#include "diloco_core/checkpoint.h"

namespace headroom::diloco_cli {

CLI::Validator NameRule() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        auto st = headroom::coord::CheckName(text, "name");
        return st ? std::string() : st.error().message();
      },
      "NAME");
}

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

// The byte-level model the worker options describe, on `corpus`.
diloco::ModelFactory ModelOf(const Args& a, const lm::Corpus& corpus) {
  diloco::LmModelOptions m;
  m.model = a.w.model;
  m.batch = a.w.batch;
  m.seq_len = a.w.seq_len;
  m.threads = a.w.threads;
  m.seed = a.w.seed;
  m.val_windows = a.val_windows;
  m.adamw = a.adamw;
  return diloco::LmModelFactory(corpus, m);
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
  app.add_option("--aggregate", a.aggregate,
                 "trimmed-mean (every contribution all-gathered and screened) or mean (trusted "
                 "members: a reduce-scatter and an all-gather, half the bytes at 4 workers)")
      ->capture_default_str();
  app.add_option("--stream-fragments", a.w.stream_fragments,
                 "Streaming DiLoCo: N fragments, N - 1 synced during the round while it computes")
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
                 "Energy model: watts per busy core (x measured CPU seconds)")
      ->capture_default_str();
  app.add_option("--idle-watts-per-worker", a.w.idle_watts_per_worker,
                 "Energy model: a worker's watts while it waits (x measured waiting seconds)")
      ->capture_default_str();
  app.add_option("--network-j-per-byte", a.w.network_j_per_byte,
                 "Energy model: joules per byte sent (default: between datacentres, 2024 "
                 "equipment, arXiv 2504.14022; the internet's 2015 average was 2.16e-4)")
      ->capture_default_str();
  app.add_option("--target-loss", a.target_loss,
                 "Validation loss (nats/byte) for to_target: tokens, time and energy until "
                 "first reached (0: none)")
      ->capture_default_str();
  app.add_option("--hostile", a.hostile,
                 "Fault injection: none, scale, flip, nan, forge (in `local`: worker-0 only)")
      ->capture_default_str();
  app.add_option("--hostile-from-round", a.w.hostile_from_round, "From this round on")
      ->capture_default_str();
  app.add_option("--site-etcd", a.site_etcd,
                 "Train on a site's spare power: its etcd, etcd://HOST:PORT[,...] (with --site)");
  cli::AddRenamedOption(app, "--fleet", "--site-etcd", &a.site_etcd);
  app.add_option("--site", a.site, "The site whose coordinator grants the watts");
  app.add_option("--site-job", a.site_job, "The worker's name at the site (default RUN.NAME)");
  cli::AddRenamedOption(app, "--fleet-job", "--site-job", &a.site_job);
  app.add_option("--init-checkpoint", a.init_checkpoint,
                 "Start from this model.ckpt instead of the seed's initialisation");
  app.add_option("--gloo-host", a.gloo_host,
                 "The address (or hostname) Gloo listens on and the peers connect to")
      ->capture_default_str();
  app.add_flag("--json", a.json_out, "Print the summary as JSON");
}

Status Resolve(Args& a, const std::string& mode) {
  a.w.mode = mode;
  auto codec = diloco::ParseCodec(a.compress);
  if (!codec) return codec.error();
  a.w.codec = *codec;
  auto aggregate = diloco::ParseAggregation(a.aggregate);
  if (!aggregate) return aggregate.error();
  a.w.aggregate = *aggregate;
  auto h = diloco::ParseHostility(a.hostile);
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
      headroom::etcd::ReadEtcdCredentials(a.etcd_options.user, a.etcd_options.password_file);
  if (!credentials) return credentials.error();
  a.credentials = *credentials;
  a.tls = {a.etcd_options.cacert, a.etcd_options.cert, a.etcd_options.key};
  if (a.site_etcd.empty() != a.site.empty())
    return Error::Usage("--site-etcd and --site go together");
  if (!a.site_etcd.empty()) {
    if (!(a.site_etcd.starts_with("etcd://") && a.site_etcd.size() > 7) &&
        !(a.site_etcd.starts_with("etcds://") && a.site_etcd.size() > 8)) {
      return Error::Usage("--site-etcd '" + a.site_etcd +
                          "': expected etcd://HOST:PORT[,HOST:PORT...] (etcds:// with TLS)");
    }
    if (auto st = headroom::coord::CheckName(a.site, "--site"); !st) return st;
    if (!a.site_job.empty()) {
      if (auto st = headroom::coord::CheckName(a.site_job, "--site-job"); !st) return st;
    }
  }
  if (!a.init_checkpoint.empty()) {
    auto c = diloco::ReadCheckpoint(a.init_checkpoint);
    if (!c) return c.error();
    if (c->model != a.w.model) {
      return Error::Input(a.init_checkpoint + ":2: field 'model': '" + c->model +
                          "', not the run's --model '" + a.w.model + "'");
    }
    a.w.init_parameters = std::move(c->parameters);
  }
  if (a.w.threads < 1 || a.w.threads > 256) return Error::Usage("--threads: 1 to 256");
  for (const auto& [flag, value] : {std::pair{"--cpu-watts-per-core", a.w.cpu_watts_per_core},
                                    std::pair{"--idle-watts-per-worker", a.w.idle_watts_per_worker},
                                    std::pair{"--network-j-per-byte", a.w.network_j_per_byte},
                                    std::pair{"--target-loss", a.target_loss}}) {
    if (!std::isfinite(value) || value < 0) {
      return Error::Usage(fmt::format("{}: {} is not a finite number at least 0", flag, value));
    }
  }
  if (a.w.lease_ttl_s < 2 || a.w.lease_ttl_s > 60) return Error::Usage("--lease-ttl-s: 2 to 60");
  if (a.w.stream_fragments < 1 ||
      a.w.stream_fragments > std::min(diloco::kMaxFragments, a.w.inner_steps)) {
    return Error::Usage(fmt::format("--stream-fragments: {} is not between 1 and {} (and H)",
                                    a.w.stream_fragments, diloco::kMaxFragments));
  }
  if (a.w.collective_timeout_s <= 0) return Error::Usage("--collective-timeout-s: positive");
  if (a.w.batch > 4096 || a.w.inner_steps > 1000000 || a.w.rounds > 1000000) {
    return Error::Usage("--batch, --inner-steps or --rounds: too large");
  }
  return headroom::OkStatus();
}

namespace {

double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

diloco::WorkerClock RealClock() {
  const auto t0 = std::chrono::steady_clock::now();
  return {
      [t0] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); },
      CpuSeconds,
      [](double s) {
        std::this_thread::sleep_for(std::chrono::microseconds(static_cast<long>(s * 1e6)));
      }};
}

diloco::EnergyModel EnergyModelOf(const diloco::WorkerOptions& o) {
  return {o.cpu_watts_per_core, o.idle_watts_per_worker, o.network_j_per_byte};
}

diloco::WorkerReportFile WorkerReportOf(const diloco::WorkerReport& r,
                                        const diloco::WorkerOptions& o, double target_loss) {
  // Idle on purpose (a duty cycle, asked to leave) is neither computing nor overhead.
  const double busy_s = r.wall_s - r.throttled_s;
  diloco::WorkerReportFile f;
  f.totals = {
      .run = o.run,
      .mode = r.mode,
      .workers = 1,
      .rounds = r.rounds_done,
      .inner_steps = o.inner_steps,
      .tokens = r.tokens,
      .final_val_loss = r.final_val_loss,
      .bytes_sent_total = r.traffic.bytes_sent,
      .membership_changes = r.membership_changes,
      .evictions = r.evictions,
      .hashes_agreed = r.hashes_agreed,
      .overhead_fraction = busy_s > 0 ? 1.0 - r.compute_s / busy_s : 0.0,
      .energy_j = diloco::EnergyOf({r.compute_cpu_s, r.other_cpu_s, r.wait_s, r.traffic.bytes_sent},
                                   EnergyModelOf(o)),
      .loss_curve = r.loss_curve,
      .to_target = std::nullopt};
  if (target_loss > 0) {
    f.totals.to_target = diloco::ToTargetOf(r.loss_curve, target_loss, r.tokens, r.wall_s,
                                            f.totals.energy_j.total());
  }
  f.name = r.name;
  f.member = r.member;
  f.rounds_contributed = r.rounds_contributed;
  f.resyncs = r.resyncs;
  f.leaves = r.leaves;
  f.bytes_received = r.traffic.bytes_received;
  f.seconds = {r.compute_s, r.communicate_s, r.wait_s, r.recover_s, r.throttled_s, r.wall_s};
  f.compute_cpu_s = r.compute_cpu_s;
  f.other_cpu_s = r.other_cpu_s;
  f.log = r.log;
  return f;
}

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
  add("--aggregate", a.aggregate);
  add("--stream-fragments", std::to_string(w.stream_fragments));
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
  add("--idle-watts-per-worker", fmt::format("{}", w.idle_watts_per_worker));
  add("--network-j-per-byte", fmt::format("{}", w.network_j_per_byte));
  if (a.target_loss > 0) add("--target-loss", fmt::format("{}", a.target_loss));
  if (!a.site_etcd.empty()) {
    add("--site-etcd", a.site_etcd);
    add("--site", a.site);  // each worker's name at the site: RUN.NAME, the default
  }
  if (hostile) {
    add("--hostile", a.hostile);
    add("--hostile-from-round", std::to_string(w.hostile_from_round));
  }
  return v;
}

}  // namespace headroom::diloco_cli
