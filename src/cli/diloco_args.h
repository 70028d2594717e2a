// `headroom diloco`'s shared parts: a worker's options (worker, ddp, replay and local take
// them), their checks, the summaries and the worker command line; and each command's Setup,
// registered by diloco_main.cc (the Setup -> Command pattern of cli/commands.h).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/etcd_options.h"
#include "diloco/worker.h"
#include "diloco_model/lm_model.h"
#include "etcd/etcd_store.h"
#include "lm/corpus.h"
#include "lm/lm.h"

namespace headroom::cli::diloco {

using nlohmann::json;

inline constexpr double kEtcdTimeoutS = 2.0;
inline constexpr double kLn2 = 0.69314718055994530942;

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
  std::string hostile = "none";
  headroom::cli::EtcdOptions etcd_options;  // --etcd-cacert ... --etcd-password-file
  headroom::coord::EtcdCredentials credentials;
  headroom::coord::EtcdTls tls;
  bool json_out = false;
  // An opportunistic member of a site's coordinator (docs/DILOCO.md, "On spare power").
  std::string site_etcd;  // --site-etcd: etcd://HOST:PORT[,HOST:PORT...]
  std::string site;
  std::string site_job;         // --site-job: the member's name; default <run>.<name>
  std::string init_checkpoint;  // the run's starting model (a model.ckpt)
  dist::WorkerOptions w;
  lm::AdamWConfig adamw;  // the inner optimizer (the model's)
  int val_windows = 64;
};

// The byte-level model the worker options describe, on `corpus`.
dist::ModelFactory ModelOf(const Args& a, const lm::Corpus& corpus);
void AddWorkerOptions(CLI::App& app, Args& a, bool need_etcd);
// Checks the options and reads what they name (key, credentials, initial checkpoint).
Status Resolve(Args& a, const std::string& mode);
dist::WorkerClock RealClock();
// The summary of the keys, for one worker's view or for a whole run.
json Summary(const std::string& run, const std::string& mode, int workers, int rounds,
             int inner_steps, std::uint64_t tokens, double final_val_loss, std::uint64_t bytes_sent,
             int membership_changes, int evictions, bool hashes_agreed, double overhead,
             double compute_j, double coordination_j, const std::vector<dist::LossPoint>& curve);
json WorkerJson(const dist::WorkerReport& r, const dist::WorkerOptions& o);
// The worker command line that reproduces a's settings.
std::vector<std::string> WorkerArgv(const Args& a, const std::string& mode, const std::string& url,
                                    const std::string& name, const std::string& out,
                                    int start_workers, bool hostile);

Command SetupWorker(CLI::App& app, std::string mode);  // worker (diloco) and ddp
Command SetupEval(CLI::App& app);
Command SetupReplay(CLI::App& app);
Command SetupLocal(CLI::App& app);
Command SetupControl(CLI::App& app);

}  // namespace headroom::cli::diloco
