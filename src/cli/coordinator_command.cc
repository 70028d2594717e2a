// `headroom coordinator`: one replica of a site's coordinator (docs/SITE.md). Any number may
// run; one leads (coord::Coordinator's election on etcd). Thin: options, the store, signals and
// the steady clock, handed to coord_server::CoordinatorDaemon (coord_server/daemon.h), which serves
// the API, steps the coordinator every period and owns the shutdown order.
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "cli/commands.h"
#include "cli/config_file.h"
#include "cli/credentials.h"
#include "cli/daemon_log.h"
#include "cli/scheduling_options.h"
#include "cli/server_options.h"
#include "cli/stop_signal.h"
#include "cli_main/etcd_options.h"
#include "coord/coordinator.h"
#include "coord/domain.h"
#include "coord/layout.h"
#include "coord_server/daemon.h"
#include "etcd/etcd_store.h"
#include "slurm/batch_scheduler.h"
#include "slurm/suspender.h"

namespace headroom::cli {
namespace {

inline constexpr double kMinPeriodS = 0.1;
inline constexpr double kMaxPeriodS = 60.0;
inline constexpr int64_t kMinLeaseTtlS = 2;
inline constexpr int64_t kMaxLeaseTtlS = 60;
inline constexpr double kMinForgetAfterS = 1.0;
inline constexpr double kMaxForgetAfterS = 7 * 86400.0;
inline constexpr double kEtcdTimeoutS = 2.0;  // connecting, and each wait for an answer

struct CoordinatorArgs {
  std::string etcd;
  std::string site;
  std::string log_format = "text";
  double site_budget_w = 0.0;
  double reserve_w = 0.0;
  EtcdOptions etcd_options;
  double period_s = 1.0;
  int64_t lease_ttl_s = 3;
  ServerArgs server = ListeningOn("127.0.0.1:10471");  // --listen, the token, --allow-host, caps
  bool token_on_reads = false;
  double forget_after_s = 60.0;
  double loan_lead_s = 0.0;
  double loan_cover = 0.5;
  bool slurm = false;
  std::string scontrol = "scontrol";
  double suspend_after_s = 3.0;
  SchedulingArgs scheduling;
  // A domain of a parent site (coord/domain.h): its etcd and name, the parent etcd's own
  // credentials, the parent lease's TTL.
  std::string parent_etcd;
  std::string parent_site;
  EtcdOptions parent_etcd_options;
  int64_t parent_lease_ttl_s = 10;
};

using Log = Logger;

// hostname:pid:random hex, unique per replica.
std::string ReplicaId() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) std::strcpy(name.data(), "host");
  std::random_device rd;
  const uint64_t random = (static_cast<uint64_t>(rd()) << 32) | rd();
  return fmt::format("{}:{}:{:016x}", name.data(), static_cast<long long>(getpid()), random);
}

// The options that depend on each other, and the site's name.
Status CheckOptions(const CoordinatorArgs& args) {
  if (auto st = coord::CheckName(args.site, "--site"); !st) return st;
  if (!(args.site_budget_w > 0.0)) {
    return Error::Usage(fmt::format("--site-budget-w {}: expected > 0", args.site_budget_w));
  }
  if (args.reserve_w >= args.site_budget_w) {
    return Error::Usage(fmt::format("--reserve-w {}: expected below --site-budget-w {}",
                                    args.reserve_w, args.site_budget_w));
  }
  if (args.parent_etcd.empty() != args.parent_site.empty()) {
    return Error::Usage("--parent-etcd and --parent-site go together (a domain of that site)");
  }
  if (!args.parent_site.empty()) {
    if (auto st = coord::CheckName(args.parent_site, "--parent-site"); !st) return st;
    if (args.parent_site == args.site && args.parent_etcd == args.etcd) {
      return Error::Usage("--parent-site: a site cannot be a domain of itself");
    }
    if (static_cast<double>(args.parent_lease_ttl_s) <= 2.0 * args.period_s) {
      return Error::Usage(fmt::format(
          "--parent-lease-ttl-s {}: must exceed twice --period-s {} (renewed once a period)",
          args.parent_lease_ttl_s, args.period_s));
    }
  }
  if (static_cast<double>(args.lease_ttl_s) <= args.period_s) {
    return Error::Usage(fmt::format(
        "--lease-ttl-s {}: must exceed --period-s {} (the lease is renewed once a period)",
        args.lease_ttl_s, args.period_s));
  }
  return OkStatus();
}

// The replica's configuration, a new id (its `listen` is the daemon's, once bound).
coord::CoordinatorConfig CoordinatorConfigOf(const CoordinatorArgs& args) {
  coord::CoordinatorConfig config;
  config.site = args.site;
  config.site_budget_w = args.site_budget_w;
  config.reserve_w = args.reserve_w;
  config.period_s = args.period_s;
  config.lease_ttl_s = args.lease_ttl_s;
  config.forget_after_s = args.forget_after_s;
  config.loan_lead_s = args.loan_lead_s;
  config.loan_cover = args.loan_cover;
  ApplyScheduling(args.scheduling, &config);
  config.parent_site = args.parent_site;
  config.id = ReplicaId();
  return config;
}

// The parent's etcd flags as EtcdOptions (the keep-alive route is --etcd-keepalive's).
EtcdOptions ParentEtcdOptions(const CoordinatorArgs& args) {
  EtcdOptions o = args.parent_etcd_options;
  o.keepalive = args.etcd_options.keepalive;
  return o;
}

coord_server::CoordinatorApiConfig ApiConfigOf(const Serving& serving, bool token_on_reads) {
  coord_server::CoordinatorApiConfig api;
  api.access = serving.access;
  api.access.token_on_reads = token_on_reads;
  api.limits.max_connections = serving.max_connections;
  api.limits.max_connections_per_address = serving.max_connections_per_address;
  return api;
}

Status RunCoordinator(const CoordinatorArgs& args) {
  LogFormat log_format = LogFormat::kText;
  if (!ParseLogFormat(args.log_format, &log_format)) {
    return Error::Usage(fmt::format("--log-format: unknown '{}' (text, json)", args.log_format));
  }
  // Every line with its time and level (cli/daemon_log.h); the loop, the server and the signal
  // thread all log, one line at a time.
  const Log log = StreamLogger(log_format, "coordinator");
  // Options first: nothing is opened or bound before they are all good.
  if (auto st = CheckOptions(args); !st) return st;
  // Secrets the unit passes as systemd credentials, where no file is named (cli/credentials.h).
  ServerArgs server_args = args.server;
  EtcdOptions etcd_options = args.etcd_options;
  for (const std::string& line : TakeCredentials(&server_args.token, &etcd_options)) log(line);
  EtcdOptions parent_options = ParentEtcdOptions(args);
  for (const std::string& line : TakeParentCredentials(&parent_options)) log(line);
  auto serving = ResolveServerOptions(server_args, log, "set the site budget");
  if (!serving) return std::move(serving).error();
  if (args.token_on_reads && serving->access.token.empty()) {
    return Error::Usage("--token-on-reads needs a token (--token-file or HEADROOM_TOKEN)");
  }
  for (const std::string& w : EtcdSecretWarnings(etcd_options)) log.Warn(w);

  // From here on, signals stop the loop; the server's threads inherit their mask.
  StopSignal signals(log, "resigning the lead first");
  // Until etcd first answers (each endpoint's timeouts in turn), a signal ends it at once.
  auto store = signals.WhileStarting([&] {
    return OpenEtcd(args.etcd, "--etcd", kEtcdTimeoutS, etcd_options, coord::Keys(args.site).root);
  });
  if (!store) return std::move(store).error();
  // A domain: the parent site's etcd, opened and read once the same way.
  std::unique_ptr<etcd::EtcdStore> parent_store;
  std::optional<coord_server::ParentParts> parent;
  if (!args.parent_etcd.empty()) {
    for (const std::string& w : EtcdSecretWarnings(parent_options)) log.Warn("parent: " + w);
    auto opened = signals.WhileStarting([&] {
      return OpenEtcd(args.parent_etcd, "--parent-etcd", kEtcdTimeoutS, parent_options,
                      coord::Keys(args.parent_site).root);
    });
    if (!opened) return Error::Io(fmt::format("--parent-etcd: {}", opened.error().message()));
    parent_store = std::move(*opened);
    parent = coord_server::ParentParts{parent_store.get(),
                                       {.parent_site = args.parent_site,
                                        .parent_etcd = parent_store->Describe(),
                                        .domain = args.site,
                                        .lease_ttl_s = args.parent_lease_ttl_s,
                                        .period_s = args.period_s,
                                        .holder = coord::DomainHolder(args.site, args.etcd)}};
  }
  // With --slurm: the leader suspends and resumes opportunistic members' Slurm jobs.
  std::unique_ptr<slurm::BatchScheduler> scontrol;
  std::optional<coord_server::SlurmParts> slurm;
  if (args.slurm) {
    scontrol = slurm::MakeScontrol(args.scontrol);
    slurm = coord_server::SlurmParts{scontrol.get(), {.suspend_after_s = args.suspend_after_s}};
  }
  const coord_server::CoordinatorClock clock{
      SteadyNowS, UnixNowS, [&signals](double t_s) { signals.SleepUntil(SteadyTime(t_s)); },
      [&signals] { signals.Wake(); }};
  coord_server::CoordinatorDaemon daemon(**store, CoordinatorConfigOf(args),
                                         ApiConfigOf(*serving, args.token_on_reads), slurm, clock,
                                         log, parent);
  if (auto st = daemon.Listen(serving->listen); !st) return st;
  daemon.Run(signals.stop());
  return OkStatus();
}

}  // namespace

Command SetupCoordinator(CLI::App& app) {
  auto a = std::make_shared<CoordinatorArgs>();
  auto config = std::make_shared<std::string>();
  app.add_option("--config", *config, "TOML file of these options (keys: the option names)");
  app.add_option("--log-format", a->log_format,
                 "Log lines: text (RFC 3339 time, level, message) or json (one object a line)");
  // --etcd, --site and --site-budget-w are required, from the command line or --config.
  app.add_option("--etcd", a->etcd, "etcd members, URL[,URL...] (http(s)://host:port; required)");
  AddEtcdOptions(app, &a->etcd_options);
  app.add_option("--site", a->site, "The site's name (letters, digits, '.', '_', '-'; required)");
  app.add_option("--site-budget-w", a->site_budget_w,
                 "The site budget (whole jobs: GPUs and node overhead), used when the site has "
                 "no ledger yet; afterwards the ledger's (POST /v1/site-budget changes it; "
                 "required)")
      ->check(Real(0.0, kMaxSitePowerW));
  app.add_option("--reserve-w", a->reserve_w, "Watts of the site budget never granted")
      ->check(Real(0.0, kMaxSitePowerW));
  app.add_option("--period-s", a->period_s, "How often the leader plans and writes")
      ->check(Real(kMinPeriodS, kMaxPeriodS));
  app.add_option("--lease-ttl-s", a->lease_ttl_s,
                 "The replica's lease: a killed leader is replaced within it (must exceed "
                 "--period-s)")
      ->check(Integer(kMinLeaseTtlS, kMaxLeaseTtlS));
  AddServerOptions(app, &a->server, "replica");
  app.add_flag("--token-on-reads", a->token_on_reads,
               "Require the token on GET /v1/status and /metrics too (GET /v1/history needs it "
               "whenever one is set; the site page, which holds no data, never)");
  app.add_option("--forget-after-s", a->forget_after_s,
                 "A job without a member for this long leaves the ledger")
      ->check(Real(kMinForgetAfterS, kMaxForgetAfterS));
  app.add_option("--loan-lead-s", a->loan_lead_s,
                 "Lend opportunistic jobs what the guaranteed ones are expected not to draw over "
                 "this many seconds (docs/SITE.md, \"Job classes\"; 0: no loans, only what the "
                 "guaranteed grants leave)")
      ->check(Real(0.0, 600.0));
  app.add_flag("--slurm", a->slurm,
               "Suspend an opportunistic member's Slurm job (its member's slurm_job) when its "
               "grant stays at 0, resume it when watts return (scontrol; SLURM_CONF as Slurm's "
               "commands take it)");
  app.add_option("--scontrol", a->scontrol, "With --slurm: the scontrol command")
      ->capture_default_str();
  app.add_option("--suspend-after-s", a->suspend_after_s,
                 "With --slurm: how long a grant of 0 lasts before the job is suspended")
      ->check(Real(0.0, 86400.0))
      ->capture_default_str();
  app.add_option("--loan-cover", a->loan_cover,
                 "With --loan-lead-s: the share of the largest job's undrawn watts never lent")
      ->check(Real(0.0, 1.0))
      ->capture_default_str();
  AddSchedulingOptions(app, &a->scheduling);
  app.add_option("--parent-etcd", a->parent_etcd,
                 "This site is a domain (one breaker's) of a parent site on this etcd, "
                 "URL[,URL...]: its leader registers there and its budget is its grant from the "
                 "parent (docs/SITE.md, \"Domains\"; with --parent-site)");
  app.add_option("--parent-site", a->parent_site, "With --parent-etcd: the parent site's name");
  app.add_option("--parent-etcd-cacert", a->parent_etcd_options.cacert,
                 "CA certificate that signed the parent etcd's (as --etcd-cacert)");
  app.add_option("--parent-etcd-cert", a->parent_etcd_options.cert,
                 "This client's certificate for the parent etcd (as --etcd-cert)");
  app.add_option("--parent-etcd-key", a->parent_etcd_options.key,
                 "This client's private key for the parent etcd (as --etcd-key)");
  app.add_option("--parent-etcd-user", a->parent_etcd_options.user,
                 "The parent etcd's user (as --etcd-user)");
  app.add_option("--parent-etcd-password-file", a->parent_etcd_options.password_file,
                 "File holding that user's password (as --etcd-password-file)");
  app.add_option("--parent-lease-ttl-s", a->parent_lease_ttl_s,
                 "The domain's lease at its parent: not renewed within it less a second, the "
                 "domain brings its jobs to their floors")
      ->check(Integer(kMinLeaseTtlS + 1, kMaxLeaseTtlS))
      ->capture_default_str();
  return [a, config, &app]() -> Status {
    if (!config->empty()) {
      if (auto applied = ApplyConfigFile(app, *config, "coordinator"); !applied) {
        return std::move(applied).error();
      }
    }
    for (const char* flag : {"--etcd", "--site", "--site-budget-w"}) {
      if (app.get_option(flag)->count() == 0) {
        return Error::Usage(
            fmt::format("{} is required (on the command line or in --config)", flag));
      }
    }
    return RunCoordinator(*a);
  };
}

}  // namespace headroom::cli
