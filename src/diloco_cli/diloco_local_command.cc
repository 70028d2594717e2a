// `headroom diloco local` (its own etcd and N worker processes on this machine, supervised by
// diloco/local_supervisor.h, one summary and report) and `control` (what a worker is asked at run
// time).
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "cli_main/renamed_options.h"
#include "common/atomic_file.h"
#include "diloco/local_supervisor.h"
#include "diloco_cli/diloco_args.h"
#include "etcd/etcd_process.h"
#include "report_page/diloco_report.h"

namespace headroom::diloco_cli {
namespace {

// What each worker would refuse, refused here before anything starts; the churn.
Result<diloco::Churn> CheckLocal(Args& a, int workers, const std::string& mode,
                                 const std::string& churn_text) {
  if (auto s = Resolve(a, mode); !s) return s.error();
  if (workers < 1 || workers > 64) return Error::Usage("--workers: 1 to 64");
  // What each worker would refuse, refused here before anything starts.
  if (mode != "diloco" && mode != "ddp")
    return Error::Usage("--mode: '" + mode + "' is not diloco or ddp");
  if (a.w.inner_steps < 1 || a.w.rounds < 1 || a.w.batch < 1 || a.w.seq_len < 1) {
    return Error::Usage("--inner-steps, --rounds, --batch and --seq-len must be at least 1");
  }
  const auto config = lm::ModelByName(a.w.model);
  if (!config) return Error::Usage("--model: " + config.error().message());
  if (a.w.seq_len > config->max_seq_len) {
    return Error::Usage(fmt::format("--seq-len {} is longer than model {}'s {}", a.w.seq_len,
                                    a.w.model, config->max_seq_len));
  }
  auto churn = diloco::ParseChurn(churn_text);
  if (!churn) return churn.error();
  if (mode == "ddp" && churn->kill_at_round >= 0) {
    return Error::Usage("--churn: the ddp baseline is not elastic");
  }
  if (churn->kill_at_round >= a.w.rounds || churn->join_at_round >= a.w.rounds) {
    return Error::Usage("--churn: rounds beyond --rounds");
  }
  return churn;
}

// The run's summary (diloco_core/run_report.h): the store's record of the rounds, and every
// worker's report but the SIGKILLed ones'. A report there that misses a key is an error naming
// the key and the file; a worker that left none (it failed: the supervisor said so) has no row.
Result<diloco::RunSummaryFile> Summarize(const Args& a, const std::string& mode, int workers,
                                         coord::Store& store, const diloco::LocalRunResult& ran,
                                         const std::string& out) {
  auto summary = diloco::ReadRunSummary(store, a.w.run);
  if (!summary) return summary.error();
  std::uint64_t bytes = 0;
  double compute_s = 0, busy_s = 0, wait_s = 0, compute_cpu = 0, other_cpu = 0;
  diloco::RunSummaryFile s;
  for (const auto& c : ran.children) {
    const std::string path = out + "/" + c.name + ".json";
    if (c.killed || !std::filesystem::exists(path)) continue;
    auto r = diloco::ReadWorkerReport(path);
    if (!r) return r.error();
    bytes += r->totals.bytes_sent_total;
    compute_s += r->seconds.compute;
    busy_s += r->seconds.wall - r->seconds.throttled;
    wait_s += r->seconds.wait;
    compute_cpu += r->compute_cpu_s;
    other_cpu += r->other_cpu_s;
    s.workers_detail.push_back({c.name, r->seconds, r->totals.bytes_sent_total,
                                r->rounds_contributed, r->resyncs, r->leaves});
  }
  s.totals = {
      .run = a.w.run,
      .mode = mode,
      .workers = workers,
      .rounds = summary->rounds,
      .inner_steps = a.w.inner_steps,
      .tokens = summary->tokens,
      .final_val_loss = summary->loss_curve.empty() ? -1.0 : summary->loss_curve.back().val_loss,
      .bytes_sent_total = bytes,
      .membership_changes = summary->membership_changes,
      .evictions = summary->rejected + summary->hash_evictions,
      .hashes_agreed = summary->hashes_agreed,
      .overhead_fraction = busy_s > 0 ? 1.0 - compute_s / busy_s : 0.0,
      .energy_j = diloco::EnergyOf({compute_cpu, other_cpu, wait_s, bytes}, EnergyModelOf(a.w)),
      .loss_curve = summary->loss_curve,
      .to_target = std::nullopt};
  s.wall_s = ran.wall_s;
  if (a.target_loss > 0) {
    // When local first saw each evaluated round agreed: the run's clock, not a worker's.
    std::vector<diloco::LossPoint> timed = s.totals.loss_curve;
    for (diloco::LossPoint& p : timed) {
      const auto at = ran.agreed_at_s.find(p.round);
      p.at_s = at == ran.agreed_at_s.end() ? -1.0 : at->second;
    }
    s.totals.to_target = diloco::ToTargetOf(timed, a.target_loss, s.totals.tokens, s.wall_s,
                                            s.totals.energy_j.total());
  }
  for (const auto& [r, t] : ran.agreed_at_s) s.rounds_done_at_s.push_back(t);
  s.out = out;
  if (std::filesystem::exists(out + "/model.ckpt")) s.checkpoint = out + "/model.ckpt";
  if (ran.killed_at_s >= 0) {
    // How long the run took to go on: from the kill to the next agreed round.
    double next = -1;
    for (const auto& [r, t] : ran.agreed_at_s) {
      if (t > ran.killed_at_s) {
        next = t - ran.killed_at_s;
        break;
      }
    }
    s.churn = diloco::ChurnFigures{ran.killed_name, ran.killed_round, next, ran.joined_round};
  }
  return s;
}

// The energy lines: each says what is measured and what is modelled.
void PrintEnergy(const diloco::RunTotals& t, const Args& a) {
  const diloco::EnergyJ& e = t.energy_j;
  std::printf(
      "  energy            %.0f J compute + %.0f J coordination (%.1f %% of %.0f J): a "
      "CPU-scale model on this machine, measured quantities x modelled figures\n",
      e.compute, e.coordination(), e.total() > 0 ? 100.0 * e.coordination() / e.total() : 0.0,
      e.total());
  std::printf("    compute         %.0f J = measured CPU s computing x %g W/core (modelled)\n",
              e.compute, a.w.cpu_watts_per_core);
  std::printf(
      "    network         %.0f J = measured bytes sent x %.3g J/byte (modelled: between "
      "datacentres; this run's bytes went over loopback)\n",
      e.network, a.w.network_j_per_byte);
  std::printf("    idle            %.0f J = measured s waiting x %g W/worker (modelled)\n", e.idle,
              a.w.idle_watts_per_worker);
  std::printf("    other CPU       %.0f J = measured CPU s not computing x %g W/core (modelled)\n",
              e.other_cpu, a.w.cpu_watts_per_core);
  if (t.to_target) {
    const diloco::ToTarget& g = *t.to_target;
    std::printf("  to loss %.4f     %s: %llu tokens, %.1f s, %.0f J (pro-rated by wall time)\n",
                g.target_loss, g.reached ? "reached" : "NOT reached (whole run)",
                static_cast<unsigned long long>(g.tokens), g.wall_s, g.energy_j);
  }
}

void PrintLocal(const diloco::RunSummaryFile& s, const std::string& mode, const Args& a) {
  const diloco::RunTotals& t = s.totals;
  std::printf("diloco local (%s): %d workers, %d rounds x %d inner steps, %llu tokens\n",
              mode.c_str(), t.workers, t.rounds, t.inner_steps,
              static_cast<unsigned long long>(t.tokens));
  std::printf("  validation loss   %.4f nats/byte (%.4f bits/byte)\n", t.final_val_loss,
              t.final_val_loss / kLn2);
  std::printf("  bytes sent        %llu\n", static_cast<unsigned long long>(t.bytes_sent_total));
  std::printf("  overhead          %.1f %% of wall time not computing\n",
              100.0 * t.overhead_fraction);
  std::printf("  membership        %d changes, %d evictions, hashes %s\n", t.membership_changes,
              t.evictions, t.hashes_agreed ? "agreed every round" : "DISAGREED");
  PrintEnergy(t, a);
  std::printf("report: %s/report.html (summary.json beside it)\n", s.out.c_str());
}

Status RunLocal(Args& a, int workers, const std::string& mode, const std::string& churn_text) {
  auto churn = CheckLocal(a, workers, mode, churn_text);
  if (!churn) return churn.error();
  auto corpus = lm::LoadCorpus(a.data, static_cast<std::size_t>(a.w.seq_len) + 1);
  if (!corpus) return corpus.error();
  std::unique_ptr<etcd::EtcdProcess> etcd;
  std::string url = a.etcd;
  if (url.empty()) {
    auto e = etcd::EtcdProcess::Start();
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
  auto store_r = headroom::etcd::EtcdStore::Open(url, kEtcdTimeoutS, a.credentials, a.tls,
                                                 a.etcd_options.KeepAlive());
  if (!store_r) return store_r.error();
  auto& store = **store_r;

  diloco::LocalRunPlan plan;
  plan.store = &store;
  plan.run = a.w.run;
  plan.rounds = a.w.rounds;
  plan.workers = workers;
  plan.out_dir = out;
  plan.churn = *churn;
  plan.seed = a.w.seed;
  // In `local`, --hostile makes worker-0 the hostile one.
  plan.argv_of = [&](const std::string& name, int start_workers, bool first) {
    return WorkerArgv(a, mode, url, name, out, start_workers, first);
  };
  auto ran = diloco::SuperviseLocal(plan, [](const std::string& line) {
    std::fprintf(stderr, "diloco local: %s\n", line.c_str());
  });
  if (!ran) return std::move(ran).error();
  auto summary = Summarize(a, mode, workers, store, *ran, out);
  if (!summary) return summary.error();
  const json j = diloco::ToJson(*summary);
  if (auto w = headroom::WriteFileAtomically(out + "/summary.json", j.dump(2) + "\n"); !w) return w;
  if (auto w = headroom::WriteFileAtomically(out + "/report.html",
                                             headroom::report::DilocoReportHtml(*summary));
      !w) {
    return w;
  }
  if (a.json_out) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    PrintLocal(*summary, mode, a);
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
      headroom::etcd::ReadEtcdCredentials(c.etcd_options.user, c.etcd_options.password_file);
  if (!credentials) return credentials.error();
  auto store = headroom::etcd::EtcdStore::Open(
      c.etcd, kEtcdTimeoutS, *credentials,
      {c.etcd_options.cacert, c.etcd_options.cert, c.etcd_options.key}, c.etcd_options.KeepAlive());
  if (!store) return store.error();
  const std::string key = diloco::RunPrefix(c.run) + "control/" + c.worker;
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

}  // namespace

cli::Command SetupLocal(CLI::App& app) {
  auto a = std::make_shared<Args>();
  auto workers = std::make_shared<int>(4);
  auto mode = std::make_shared<std::string>("diloco");
  auto churn = std::make_shared<std::string>();
  app.add_option("--workers", *workers, "Worker processes")->capture_default_str();
  app.add_option("--mode", *mode, "diloco or ddp")->capture_default_str();
  app.add_option("--churn", *churn, "kill-at-round:R[,join-at-round:R2]");
  a->w.inner_steps = 20;
  a->w.rounds = 5;
  AddWorkerOptions(app, *a, false);
  return cli::SayingDeprecations(app, "headroom diloco", [a, workers, mode, churn] {
    return RunLocal(*a, *workers, *mode, *churn);
  });
}

cli::Command SetupControl(CLI::App& app) {
  auto c = std::make_shared<ControlArgs>();
  app.add_option("--etcd", c->etcd, "etcd endpoints")->required();
  app.add_option("--run", c->run, "The run")->check(NameRule())->capture_default_str();
  app.add_option("--worker", c->worker, "The worker's --name")->check(NameRule())->required();
  app.add_option("--threads", c->threads, "libtorch threads");
  app.add_option("--duty", c->duty, "Fraction of time computing, (0, 1]");
  app.add_flag("--leave", c->leave, "Leave at the next round boundary");
  app.add_flag("--rejoin", c->rejoin, "Come back (through a donor)");
  AddEtcdOptions(app, &c->etcd_options);
  return [c] { return RunControl(*c); };
}

}  // namespace headroom::diloco_cli
