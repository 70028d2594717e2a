// `headroom diloco worker`, `ddp`, `replay` and `eval`: one worker of a run on etcd, the
// arithmetic of a run in one process, a checkpoint's validation loss.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli_main/renamed_options.h"
#include "common/atomic_file.h"
#include "common/read_file.h"
#include "coord/layout.h"
#include "diloco/replay.h"
#include "diloco_cli/diloco_args.h"
#include "diloco_core/checkpoint.h"
#include "diloco_gloo/gloo_communicator.h"
#include "diloco_site/site_power.h"

namespace headroom::diloco_cli {
namespace {

Status RunWorkerCommand(Args& a, const std::string& mode) {
  if (auto s = Resolve(a, mode); !s) return s;
  auto corpus = lm::LoadCorpus(a.data, static_cast<std::size_t>(a.w.seq_len) + 1);
  if (!corpus) return corpus.error();
  auto store = headroom::etcd::EtcdStore::Open(a.etcd, kEtcdTimeoutS, a.credentials, a.tls,
                                               a.etcd_options.KeepAlive());
  if (!store) return store.error();
  headroom::coord::Store& st = **store;
  diloco::CommFactory comm = [&st, host = a.gloo_host](const std::string& prefix, int rank,
                                                       int size, double timeout_s) {
    diloco::GlooOptions g;
    g.prefix = prefix;
    g.host = host;
    g.rank = rank;
    g.size = size;
    g.timeout_s = timeout_s;
    return diloco::ConnectGloo(st, g);
  };
  // On a site's spare power: an opportunistic member of its coordinator, on the site's etcd.
  std::unique_ptr<headroom::etcd::EtcdStore> site_store;
  std::unique_ptr<diloco::SitePower> power;
  if (!a.site_etcd.empty()) {
    // The site's etcd: plain (etcd://), or with the same TLS and user as the run's (etcds://).
    const bool site_tls = a.site_etcd.starts_with("etcds://");
    auto fs = headroom::etcd::EtcdStore::Open(
        a.site_etcd, kEtcdTimeoutS, site_tls ? a.credentials : headroom::etcd::EtcdCredentials{},
        site_tls ? a.tls : headroom::etcd::EtcdTls{}, a.etcd_options.KeepAlive());
    if (!fs) return fs.error();
    site_store = std::move(*fs);
    diloco::SitePowerConfig fc;
    fc.site = a.site;
    fc.job =
        a.site_job.empty()
            ? a.w.run + "." + (a.w.name.empty() ? fmt::format("worker-{}", getpid()) : a.w.name)
            : a.site_job;
    if (auto bad = headroom::coord::CheckName(fc.job, "--site-job"); !bad) return bad;
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
    power = std::make_unique<diloco::SitePower>(
        *site_store, fc,
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
  const diloco::ModelFactory model = ModelOf(a, *corpus);
  auto report = diloco::RunWorker(st, comm, model, a.w, RealClock());
  power.reset();  // leaves the site
  if (!report) return report.error();
  diloco::WorkerReportFile file = WorkerReportOf(*report, a.w, a.target_loss);
  if (!a.out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(a.out, ec);
    if (!report->final_params.empty()) {
      diloco::Checkpoint c{a.w.model, a.w.rounds - 1, 0, report->final_params};
      if (auto w = diloco::WriteCheckpoint(a.out + "/model.ckpt", c); !w) return w;
      file.checkpoint = a.out + "/model.ckpt";
    }
  }
  const json j = diloco::ToJson(file);
  if (!a.out.empty()) {
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

// `replay`: the run's arithmetic for a membership schedule, in one process (diloco/replay.h).
Status RunReplay(Args& a, const std::string& schedule_path, int workers) {
  if (auto s = Resolve(a, "diloco"); !s) return s;
  if (a.target_loss > 0) {
    return Error::Usage(
        "replay: --target-loss is not replayed (a replay has no wall time or "
        "energy; its loss_curve gives the tokens)");
  }
  auto read = headroom::ReadFileCapped(schedule_path, headroom::kMaxDataFileBytes, "--schedule");
  if (!read) return read.error();
  const std::string text = std::move(*read);
  auto members = diloco::ParseMembershipSchedule(text, schedule_path);
  if (!members) return members.error();
  auto corpus = lm::LoadCorpus(a.data, static_cast<std::size_t>(a.w.seq_len) + 1);
  if (!corpus) return corpus.error();
  diloco::ReplayOptions o;
  o.worker = a.w;
  o.workers = workers;
  o.members = *members;
  if (a.w.rounds > 0 && static_cast<size_t>(a.w.rounds) < o.members.size()) {
    o.members.resize(static_cast<size_t>(a.w.rounds));
  }
  auto r = diloco::ReplayRun(ModelOf(a, *corpus), o, [](int done, int total) {
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
  auto c = diloco::ReadCheckpoint(checkpoint);
  if (!c) return c.error();
  const auto config = lm::ModelByName(c->model);
  if (!config) return Error::Input(checkpoint + ":2: field 'model': " + config.error().message());
  auto corpus = lm::LoadCorpus(data, static_cast<std::size_t>(seq_len) + 1);
  if (!corpus) return corpus.error();
  lm::ByteLm model(*config, {}, 1, 1);
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

}  // namespace

cli::Command SetupWorker(CLI::App& app, std::string mode) {
  auto a = std::make_shared<Args>();
  AddWorkerOptions(app, *a, true);
  return cli::SayingDeprecations(app, "headroom diloco",
                                 [a, mode] { return RunWorkerCommand(*a, mode); });
}

cli::Command SetupEval(CLI::App& app) {
  struct EvalArgs {
    std::string checkpoint, data = DefaultCorpus();
    int windows = 256, seq_len = 128;
    bool json_out = false;
  };
  auto e = std::make_shared<EvalArgs>();
  app.add_option("--checkpoint", e->checkpoint, "model.ckpt of a run")->required();
  app.add_option("--data", e->data, "Corpus directory")->capture_default_str();
  app.add_option("--val-windows", e->windows, "Validation windows")->capture_default_str();
  app.add_option("--seq-len", e->seq_len, "Bytes per window")->capture_default_str();
  app.add_flag("--json", e->json_out, "JSON");
  return [e] { return RunEval(e->checkpoint, e->data, e->windows, e->seq_len, e->json_out); };
}

cli::Command SetupReplay(CLI::App& app) {
  auto a = std::make_shared<Args>();
  auto schedule = std::make_shared<std::string>();
  auto workers = std::make_shared<int>(4);
  app.add_option("--schedule", *schedule, "round,workers CSV (sites-sim --schedule-dir)")
      ->required();
  app.add_option("--workers", *workers, "Replicas (a round's members are the first k)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  a->w.rounds = 0;  // all of the schedule
  AddWorkerOptions(app, *a, false);
  return cli::SayingDeprecations(app, "headroom diloco", [a, schedule, workers] {
    return RunReplay(*a, *schedule, *workers);
  });
}

}  // namespace headroom::diloco_cli
