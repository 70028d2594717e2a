// `headroom diloco`'s shared parts: a worker's options (worker, ddp, replay and local take
// them), their checks, the summaries and the worker command line; and each command's Setup,
// registered by diloco_main.cc (the Setup -> Command pattern of cli/commands.h).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_main/command.h"
#include "cli_main/etcd_options.h"
#include "diloco/worker.h"
#include "diloco_core/run_report.h"
#include "diloco_model/lm_model.h"
#include "etcd/etcd_store.h"
#include "lm/corpus.h"
#include "lm/lm.h"

namespace headroom::diloco_cli {

using diloco::kLn2;
using nlohmann::json;

inline constexpr double kEtcdTimeoutS = 2.0;

// A run's or a worker's name becomes part of etcd keys: 1-64 of [A-Za-z0-9._-].
CLI::Validator NameRule();
// This executable's directory.
std::string SelfDir();
// The corpus scripts/setup.sh builds: build/corpus, next to build/bin; for the other build trees
// (build-asan, ...) the source tree's build/corpus.
std::string DefaultCorpus();

struct Args {
  std::string etcd;
  std::string data = DefaultCorpus();
  std::string out;
  std::string key_file;
  std::string compress = "int8";
  std::string aggregate = "trimmed-mean";
  std::string hostile = "none";
  headroom::cli::EtcdOptions etcd_options;  // --etcd-cacert ... --etcd-password-file
  headroom::etcd::EtcdCredentials credentials;
  headroom::etcd::EtcdTls tls;
  bool json_out = false;
  // An opportunistic member of a site's coordinator (docs/DILOCO.md, "On spare power").
  std::string site_etcd;  // --site-etcd: etcd://HOST:PORT[,HOST:PORT...]
  std::string site;
  std::string site_job;         // --site-job: the member's name; default <run>.<name>
  std::string init_checkpoint;  // the run's starting model (a model.ckpt)
  // The address this worker's Gloo listens on and its peers connect to (docs/DILOCO.md, "Over a
  // constrained link"): loopback unless the workers are on separate hosts or namespaces.
  std::string gloo_host = "127.0.0.1";
  diloco::WorkerOptions w;
  lm::AdamWConfig adamw;  // the inner optimizer (the model's)
  int val_windows = 64;
  double target_loss = 0.0;  // --target-loss, nats/byte: to_target in the reports (0: none)
};

// The byte-level model the worker options describe, on `corpus`.
diloco::ModelFactory ModelOf(const Args& a, const lm::Corpus& corpus);
void AddWorkerOptions(CLI::App& app, Args& a, bool need_etcd);
// Checks the options and reads what they name (key, credentials, initial checkpoint).
Status Resolve(Args& a, const std::string& mode);
diloco::WorkerClock RealClock();
// The energy model the worker options hold.
diloco::EnergyModel EnergyModelOf(const diloco::WorkerOptions& o);
// A worker's report file (diloco_core/run_report.h): its report, its energy and overhead from
// the options (docs/DILOCO.md, "Accounting"), to_target when target_loss > 0, with no
// checkpoint yet.
diloco::WorkerReportFile WorkerReportOf(const diloco::WorkerReport& r,
                                        const diloco::WorkerOptions& o, double target_loss);
// The worker command line that reproduces a's settings.
std::vector<std::string> WorkerArgv(const Args& a, const std::string& mode, const std::string& url,
                                    const std::string& name, const std::string& out,
                                    int start_workers, bool hostile);

cli::Command SetupWorker(CLI::App& app, std::string mode);  // worker (diloco) and ddp
cli::Command SetupEval(CLI::App& app);
cli::Command SetupReplay(CLI::App& app);
cli::Command SetupLocal(CLI::App& app);
cli::Command SetupControl(CLI::App& app);

}  // namespace headroom::diloco_cli
