#include "agent/api.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "agent/dashboard.h"
#include "build_info/build_info.h"
#include "net/json_body.h"
#include "net/metrics_text.h"
#include "net/query.h"

namespace headroom::agent {

namespace {

using nlohmann::json;

// Never throws on text a client sent: invalid UTF-8 is replaced, not an exception.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

net::Response Json(int status, std::string body) {
  return net::JsonResponse(status, std::move(body));
}

}  // namespace

void Shared::NotifyDecision() {
  // Under the lock: a server that cleared `wake` (stopping) is never called after.
  MutexLock lock(mu);
  if (wake) wake();
}

std::string ActuationJson(const Actuation& a, std::optional<int> step) {
  json j{{"concurrency", a.concurrency},
         {"group_size", a.group_size},
         {"seq", a.seq},
         {"valid_for_s", a.valid_for_s},
         {"reason", a.reason},
         {"hold_s", a.hold_s},
         {"hold_id", a.hold_id},
         {"site", a.site},
         {"standby", a.standby}};
  if (step) j["step"] = *step;
  return Dump(j) + "\n";
}

namespace {

template <typename T>
json OptionalJson(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

// Per GPU: a number, or null where the source does not say.
json PerGpuJson(const std::vector<std::optional<double>>& values) {
  json out = json::array();
  for (const auto& v : values) out.push_back(v ? json(*v) : json(nullptr));
  return out;
}

}  // namespace

std::string StatusJson(const AgentStatus& s,
                       const std::optional<net::ConnectionCounters>& connections,
                       const std::optional<SiteHealth>& site) {
  json j;
  j["version"] = Version();
  j["commit"] = Commit();
  j["t_s"] = s.t_s;
  j["power_w"] = s.power_w;
  j["power_limit_w"] = PerGpuJson(s.power_limit_w);
  // The site card: what the job acts on in its site (null: not in a site).
  j["site"] = site ? json{{"site", site->site},
                          {"job", site->job},
                          {"state", site->state},
                          {"job_budget_w", site->job_budget_w},
                          {"lease", fmt::format("{:x}", site->lease)},
                          {"term", site->term},
                          {"fences", site->fences},
                          {"leases_lost", site->leases_lost}}
                   : json(nullptr);
  j["job_power_w"] = s.job_power_w;
  j["actuation"] = {{"concurrency", s.actuation.concurrency},
                    {"group_size", s.actuation.group_size},
                    {"seq", s.actuation.seq},
                    {"valid_for_s", s.actuation.valid_for_s},
                    {"reason", s.actuation.reason},
                    {"hold_s", s.actuation.hold_s},
                    {"hold_id", s.actuation.hold_id},
                    {"site", s.actuation.site},
                    {"standby", s.actuation.standby},
                    {"power_limit_w", s.actuation.power_limit_w}};
  j["decisions"] = s.decisions;
  j["telemetry_errors"] = s.telemetry_errors;
  j["trace_write_errors"] = s.trace_write_errors;
  j["safe_decisions"] = s.safe_decisions;
  j["tokens_per_s"] = s.tokens_per_s;
  j["group_size_changes"] = s.group_size_changes;
  j["group_size_changed_at_step"] =
      s.group_size_changed_at_step ? json(*s.group_size_changed_at_step) : json(nullptr);
  j["report_age_s"] = s.report_age_s < 0.0 ? json(nullptr) : json(s.report_age_s);
  if (s.report) {
    j["report"] = {{"step", s.report->step},
                   {"phase", ReportedPhaseName(*s.report)},
                   {"tokens", s.report->tokens},
                   {"in_flight", s.report->in_flight},
                   {"progress", s.report->progress},
                   {"group_size", OptionalJson(s.report->group_size)},
                   {"engines", OptionalJson(s.report->engines)},
                   {"admission", OptionalJson(s.report->admission)}};
  }
  const TrainerMismatch& m = s.mismatch;
  j["trainer"] = {
      {"state", TrainerPresenceName(s.trainer)},
      {"last_report_unix_s",
       s.last_report_unix_s > 0.0 ? json(s.last_report_unix_s) : json(nullptr)},
      {"mismatch",
       {{"any", m.any()},
        {"group_size", m.group_size},
        {"group_size_trainer", m.group_size ? json(m.group_size_trainer) : json(nullptr)},
        {"group_size_decided", m.group_size ? json(m.group_size_decided) : json(nullptr)},
        {"pinned_group_size", OptionalJson(m.pinned_group_size)},
        {"in_flight", m.in_flight},
        {"in_flight_trainer", m.in_flight ? json(m.in_flight_trainer) : json(nullptr)},
        {"in_flight_allowed", m.in_flight ? json(m.in_flight_allowed) : json(nullptr)},
        {"admission", m.admission},
        {"admission_trainer", m.admission ? json(m.admission_trainer) : json(nullptr)},
        {"admission_policy", m.admission ? json(m.admission_policy) : json(nullptr)}}}};
  j["max_hold_s"] = s.max_hold_s;
  j["budget_w"] = s.budget_w;  // = budget_per_gpu_w, kept for earlier clients
  j["budget_per_gpu_w"] = s.budget_w;
  j["job_budget_w"] = s.budget_w * static_cast<double>(s.gpus);
  j["budget_from"] = s.budget_from;
  j["floor_w"] = s.floor_w ? json(*s.floor_w) : json(nullptr);
  const auto fraction = [](const std::optional<double>& f) { return f ? json(*f) : json(nullptr); };
  j["violation_fraction"] = {{"0.5s", fraction(s.violation_fraction[0])},
                             {"30s", fraction(s.violation_fraction[1])},
                             {"5min", fraction(s.violation_fraction[2])}};
  j["windows"] = {{"0.5s", s.windows[0]}, {"30s", s.windows[1]}, {"5min", s.windows[2]}};
  j["long_polls_waiting"] = s.long_polls_waiting;
  if (connections) j["connections"] = *connections;
  j["decision_latency_s"] = {{"p50", s.decision_p50_s},
                             {"p99", s.decision_p99_s},
                             {"max", s.decision_max_s},
                             {"samples", s.latency_samples}};
  return Dump(j) + "\n";
}

namespace {

constexpr const char* kWindowNames[] = {"0.5s", "30s", "5min"};

// The power, budget and actuation families.
void PowerMetrics(const AgentStatus& s, net::MetricsText& w) {
  w.Family("headroom_power_watts", "gauge", "Telemetry power per GPU.");
  for (size_t g = 0; g < s.power_w.size(); ++g) {
    w.Sample("headroom_power_watts", "gpu", std::to_string(g), s.power_w[g]);
  }
  w.Family("headroom_power_limit_watts", "gauge",
           "The power limit in force per GPU (the telemetry's enforced limit).");
  for (size_t g = 0; g < s.power_limit_w.size(); ++g) {
    if (!s.power_limit_w[g]) continue;  // the source does not say
    w.Sample("headroom_power_limit_watts", "gpu", std::to_string(g), *s.power_limit_w[g]);
  }
  w.Gauge("headroom_budget_watts", "Budget per GPU in force.", s.budget_w);
  w.Gauge("headroom_job_budget_watts", "The job's budget in force (per GPU x GPUs).",
          s.budget_w * static_cast<double>(s.gpus));
  w.Family("headroom_concurrency", "gauge", "Generation concurrency decided.");
  w.Sample("headroom_concurrency", s.actuation.concurrency);
  w.Family("headroom_group_size", "gauge", "Group size decided.");
  w.Sample("headroom_group_size", s.actuation.group_size);
}

// The windows scored, and what the alerts of deploy/prometheus/headroom.rules.yml need
// (docs/AGENT.md, "Monitoring").
void WindowMetrics(const AgentStatus& s, net::MetricsText& w) {
  w.Family("headroom_windows_total", "counter", "Windows closed and scored, per window length.");
  for (size_t i = 0; i < 3; ++i) {
    w.Sample("headroom_windows_total", "window", kWindowNames[i], s.windows[i]);
  }
  w.Family("headroom_windows_over_budget_total", "counter",
           "Windows closed whose mean power was over the budget in force over them, per window "
           "length.");
  for (size_t i = 0; i < 3; ++i) {
    w.Sample("headroom_windows_over_budget_total", "window", kWindowNames[i], s.windows_over[i]);
  }
  w.Family("headroom_concurrency_at_minimum", "gauge",
           "1 while the decided concurrency is the lowest its range allows (nothing left to lower "
           "by steering the workload), else 0.");
  w.Sample("headroom_concurrency_at_minimum", s.concurrency_at_minimum ? 1 : 0);
  w.Family("headroom_budget_below_floor", "gauge",
           "1 while the budget in force is below the job's known floor (it cannot be met by "
           "steering the workload), else 0.");
  w.Sample("headroom_budget_below_floor", s.budget_below_floor ? 1 : 0);
}

// The trainer's metrics: its reports, whether it is heard, and its mismatches.
void TrainerMetrics(const AgentStatus& s, net::MetricsText& w) {
  w.Counter("headroom_trainer_reports_total",
            "Trainer reports taken (POST /v1/report, or the twin's).", s.reports);
  w.Gauge("headroom_trainer_last_report_age_seconds",
          "Agent seconds since the trainer's last report (NaN before the first).",
          s.report_age_s < 0.0 ? std::nan("") : s.report_age_s);
  w.Gauge("headroom_trainer_up",
          "Whether the trainer is heard: 1 reporting, 0 silent past --report-timeout-s (taken as "
          "gone), NaN before its first report.",
          s.trainer == TrainerPresence::kNever       ? std::nan("")
          : s.trainer == TrainerPresence::kReporting ? 1.0
                                                     : 0.0);
  w.Family("headroom_trainer_mismatch", "gauge",
           "1 once the trainer's own values have differed from the decisions (docs/TRAINERS.md, "
           "\"Mismatch\"), by kind.");
  w.Sample("headroom_trainer_mismatch", "kind", "group_size", s.mismatch.group_size ? 1 : 0);
  w.Sample("headroom_trainer_mismatch", "kind", "in_flight", s.mismatch.in_flight ? 1 : 0);
  w.Sample("headroom_trainer_mismatch", "kind", "admission", s.mismatch.admission ? 1 : 0);
}

// A site member's metrics (with --site-etcd): headroom_site_*, and each again under its name of
// the previous release, headroom_fleet_*, with the same value (deprecated: CHANGELOG.md,
// "Renamed"; removed in the next release).
void SiteMetrics(const SiteHealth& h, net::MetricsText& w) {
  struct Family {
    const char* suffix;  // after headroom_site_ (and headroom_fleet_)
    const char* type;
    const char* help;
    uint64_t value;
  };
  const Family families[] = {
      {"fenced", "gauge",
       "1 while the job acts on its floor because its site lease was not renewed in time, else 0.",
       h.fenced ? 1U : 0U},
      {"fences_total", "counter", "Times the job began acting on its floor, fenced.", h.fences},
      {"lease_lost_total", "counter",
       "Site lease renewals the store answered with the lease gone (expired).", h.leases_lost},
      {"grants_watched_total", "counter",
       "Newer grants the member's watch on its grant brought as they were written (not a read).",
       h.grants_watched},
  };
  for (const Family& f : families) {
    const std::string name = fmt::format("headroom_site_{}", f.suffix);
    w.Family(name, f.type, f.help);
    w.Sample(name, f.value);
  }
  for (const Family& f : families) {
    const std::string name = fmt::format("headroom_fleet_{}", f.suffix);
    w.Family(name, f.type,
             fmt::format("Deprecated: renamed headroom_site_{}, removed in the next release.",
                         f.suffix));
    w.Sample(name, f.value);
  }
}

}  // namespace

std::string MetricsText(const AgentStatus& s, const std::optional<SiteHealth>& site) {
  net::MetricsText w(BuildInfoMetric());
  PowerMetrics(s, w);
  w.Family("headroom_violation_fraction", "gauge",
           "Windows over budget / windows closed, on telemetry (NaN before the first window "
           "closes).");
  for (size_t i = 0; i < 3; ++i) {
    const auto& f = s.violation_fraction[i];
    w.Sample("headroom_violation_fraction", "window", kWindowNames[i], f ? *f : std::nan(""));
  }
  w.Counter("headroom_decisions_total", "Control decisions.", s.decisions);
  w.Counter("headroom_telemetry_errors_total", "Failed or stale telemetry reads.",
            s.telemetry_errors);
  w.Gauge("headroom_tokens_per_second", "Tokens per second reported by the trainer.",
          s.tokens_per_s);
  w.Counter("headroom_trace_write_errors_total", "Failed writes to the agent's trace or site log.",
            s.trace_write_errors);
  w.Family("headroom_decision_latency_seconds", "summary",
           fmt::format("Telemetry read + decision + publication, over the last {} decisions.",
                       kLatencyKeep));
  w.Sample("headroom_decision_latency_seconds", "quantile", "0.5", s.decision_p50_s);
  w.Sample("headroom_decision_latency_seconds", "quantile", "0.99", s.decision_p99_s);
  w.Sample("headroom_decision_latency_seconds_sum", s.latency_sum_s);
  w.Sample("headroom_decision_latency_seconds_count", s.latency_samples);
  WindowMetrics(s, w);
  TrainerMetrics(s, w);
  if (site) SiteMetrics(*site, w);
  return std::move(w).text();
}

std::string HistoryJson(const std::vector<HistoryPoint>& points, double budget_w) {
  json j;
  j["budget_w"] = budget_w;
  json& out = j["points"] = json::array();
  for (const HistoryPoint& p : points) {
    out.push_back(
        {{"t_s", p.t_s},
         {"unix_s", p.unix_s > 0.0 ? json(p.unix_s) : json(nullptr)},
         {"power_w", p.power_w.empty() ? json(nullptr) : json(p.power_w)},
         {"power_limit_w", p.power_limit_w.empty() ? json(nullptr) : PerGpuJson(p.power_limit_w)},
         {"phase", p.phase ? json(control::PhaseName(*p.phase)) : json(nullptr)},
         {"budget_w", p.budget_w},
         {"concurrency", p.concurrency},
         {"group_size", p.group_size},
         {"tokens_per_s", p.tokens_per_s}});
  }
  return Dump(j) + "\n";
}

namespace {

// A request body as a JSON object; the error names the field where the body goes wrong.
Result<json> ParseObject(std::string_view body) {
  if (Status st = net::CheckJsonBody(body); !st) return std::move(st).error();
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    return Error::Input(fmt::format("body is not JSON: {}", e.what()));
  }
  if (!j.is_object()) return Error::Input("body: expected a JSON object");
  return j;
}

}  // namespace

Result<double> ParseBudget(std::string_view body, int gpus,
                           const std::optional<std::pair<double, double>>& range_w) {
  auto parsed = ParseObject(body);
  if (!parsed) return std::move(parsed).error();
  const json& j = *parsed;
  for (const auto& [key, value] : j.items()) {
    if (key != "budget_per_gpu_w" && key != "job_budget_w") {
      return Error::Input(fmt::format("field '{}': unknown (give budget_per_gpu_w or job_budget_w)",
                                      key.substr(0, 64)));
    }
  }
  const bool per_gpu = j.contains("budget_per_gpu_w");
  if (per_gpu == j.contains("job_budget_w")) {
    return Error::Input("body: give one of 'budget_per_gpu_w' and 'job_budget_w'");
  }
  const char* field = per_gpu ? "budget_per_gpu_w" : "job_budget_w";
  const double scale = per_gpu ? 1.0 : static_cast<double>(std::max(gpus, 1));
  const double lo_w = kMinBudgetPerGpuW * scale;
  const double hi_w = kMaxBudgetPerGpuW * scale;
  const std::string gpus_note = per_gpu ? std::string() : fmt::format(" for {} GPU(s)", gpus);
  const json& v = j[field];
  if (!v.is_number() || !(v.get<double>() >= lo_w && v.get<double>() <= hi_w)) {
    return Error::Input(
        fmt::format("field '{}': expected watts in [{}, {}]{}", field, lo_w, hi_w, gpus_note));
  }
  const double w = v.get<double>() / scale;
  if (range_w && !(w >= range_w->first && w <= range_w->second)) {
    return Error::Input(fmt::format(
        "field '{}': {:.1f} W per GPU is outside the policy's trained budgets [{}, {}] W per GPU",
        field, w, range_w->first, range_w->second));
  }
  return w;
}

Result<TrainerReport> ParseReport(std::string_view body) {
  auto parsed = ParseObject(body);
  if (!parsed) return std::move(parsed).error();
  const json& j = *parsed;
  TrainerReport r;
  auto integer = [&](const char* key, int* out) -> Status {
    if (!j.contains(key)) return Error::Input(fmt::format("field '{}': missing", key));
    if (!j[key].is_number_integer() || j[key].get<long long>() < 0 ||
        j[key].get<long long>() > 1'000'000'000) {
      return Error::Input(fmt::format("field '{}': expected an integer in [0, 1e9]", key));
    }
    *out = j[key].get<int>();
    return OkStatus();
  };
  if (auto s = integer("step", &r.step); !s) return std::move(s).error();
  if (auto s = integer("in_flight", &r.in_flight); !s) return std::move(s).error();
  if (!j.contains("tokens") || !j["tokens"].is_number() || !(j["tokens"].get<double>() >= 0.0) ||
      j["tokens"].get<double>() > 1e15) {
    return Error::Input("field 'tokens': expected a number in [0, 1e15]");
  }
  r.tokens = j["tokens"].get<double>();
  if (!j.contains("phase") || !j["phase"].is_string()) {
    return Error::Input("field 'phase': expected a string");
  }
  const std::string phase_name = j["phase"].get<std::string>();
  const auto phase =
      phase_name == "eval" ? std::optional(control::Phase::kRollout) : PhaseFromName(phase_name);
  if (!phase) {
    return Error::Input(
        fmt::format("field 'phase': one of {}, eval", fmt::join(control::kPhaseNames, ", ")));
  }
  r.phase = *phase;
  r.eval = phase_name == "eval";
  if (j.contains("progress")) {
    if (!j["progress"].is_number() || !(j["progress"].get<double>() >= 0.0) ||
        j["progress"].get<double>() > 1.0) {
      return Error::Input("field 'progress': expected a number in [0, 1]");
    }
    r.progress = j["progress"].get<double>();
  }
  if (j.contains("group_size")) {
    if (!j["group_size"].is_number_integer() || j["group_size"].get<long long>() < 1 ||
        j["group_size"].get<long long>() > 1'000'000) {
      return Error::Input("field 'group_size': expected an integer in [1, 1e6]");
    }
    r.group_size = j["group_size"].get<int>();
  }
  if (j.contains("engines")) {
    if (!j["engines"].is_number_integer() || j["engines"].get<long long>() < 1 ||
        j["engines"].get<long long>() > 100'000) {
      return Error::Input("field 'engines': expected an integer in [1, 1e5]");
    }
    r.engines = j["engines"].get<int>();
  }
  if (j.contains("admission")) {
    if (!j["admission"].is_string() ||
        (j["admission"] != "continuous" && j["admission"] != "chunked")) {
      return Error::Input("field 'admission': one of continuous, chunked");
    }
    r.admission = j["admission"].get<std::string>();
  }
  return r;
}

Api::Api(Shared& shared, ApiConfig config)
    : shared_(shared), config_(std::move(config)), router_(config_.access, "agent") {
  using Access = net::Router::Access;
  // Static: the page holds no data, so it needs no token even with token_on_reads (its
  // scripts send the token that the address's #token= fragment gives them).
  router_.Add("/", Access::kPage, [](const net::Request&, std::string_view) {
    net::Response r;
    r.content_type = "text/html; charset=utf-8";
    r.body.assign(kDashboardHtml.data(), kDashboardHtml.size());
    r.headers.emplace_back("Content-Security-Policy",
                           "default-src 'none'; script-src 'unsafe-inline'; style-src "
                           "'unsafe-inline'; connect-src 'self'; img-src 'self' data:; "
                           "frame-ancestors 'none'");
    return r;
  });
  router_.Add("/v1/actuation", Access::kRead,
              [this](const net::Request& r, std::string_view q) { return GetActuation(r, q); });
  router_.Add("/v1/status", Access::kRead,
              [this](const net::Request&, std::string_view q) { return StatusOrMetrics(true, q); });
  router_.Add("/v1/history", Access::kRead,
              [this](const net::Request&, std::string_view q) { return History(q); });
  router_.Add("/metrics", Access::kRead, [this](const net::Request&, std::string_view q) {
    return StatusOrMetrics(false, q);
  });
  router_.Add("/v1/report", Access::kWrite,
              [this](const net::Request& r, std::string_view q) { return Report(r, q); });
  if (shared_.budget != nullptr) {
    router_.Add("/v1/budget", Access::kWrite,
                [this](const net::Request& r, std::string_view q) { return PostBudget(r, q); });
  } else if (shared_.site) {
    router_.Add("/v1/budget", Access::kWrite, [](const net::Request&, std::string_view) {
      return net::ErrorResponse(409,
                                "in a site the coordinator sets the budget: POST "
                                "/v1/site-budget to the coordinator, or change the job's floor");
    });
  }
}

net::Response Api::Handle(const net::Request& request) { return router_.Handle(request); }

net::Response Api::ActuationNow() {
  MutexLock lock(shared_.mu);
  return Json(200, ActuationJson(shared_.agent->actuation()));
}

bool Api::Ready(uint64_t after) {
  MutexLock lock(shared_.mu);
  return shared_.agent->actuation().seq > after;
}

net::Response Api::EndPark(uint64_t) {
  MutexLock lock(shared_.mu);
  --shared_.long_polls;
  return Json(200, ActuationJson(shared_.agent->actuation()));
}

net::Response Api::GetActuation(const net::Request& request, std::string_view query) {
  if (request.method == "HEAD") {
    if (!query.empty()) return net::ErrorResponse(400, "query: HEAD /v1/actuation takes none");
    return ActuationNow();
  }
  auto q = net::ParseQuery(query, {"after", "timeout_s", "step"});
  if (!q) return net::ErrorResponse(400, q.error().message());
  const auto after_text = q->Get("after");
  const auto timeout_text = q->Get("timeout_s");
  if (const auto step_text = q->Get("step")) {
    if (after_text || timeout_text) {
      return net::ErrorResponse(400, "step: not with after or timeout_s");
    }
    const auto step = net::ParseQueryUint(*step_text);
    if (!step || *step > 1'000'000'000) {
      return net::ErrorResponse(400, "step: expected a trainer step in [0, 1e9]");
    }
    MutexLock lock(shared_.mu);
    return Json(200, ActuationJson(shared_.agent->ForStep(static_cast<int>(*step)),
                                   static_cast<int>(*step)));
  }
  if (!after_text) {
    if (timeout_text) return net::ErrorResponse(400, "timeout_s: only with after");
    return ActuationNow();
  }
  const auto after = net::ParseQueryUint(*after_text);
  if (!after) return net::ErrorResponse(400, "after: expected a sequence number (decimal digits)");
  double timeout_s = kDefaultLongPollS;
  if (timeout_text) {
    const auto t = net::ParseQueryReal(*timeout_text);
    if (!t || *t < 0.0 || *t > kMaxLongPollS) {
      return net::ErrorResponse(
          400, fmt::format("timeout_s: expected seconds in [0, {}]", kMaxLongPollS));
    }
    timeout_s = *t;
  }
  MutexLock lock(shared_.mu);
  const Actuation& a = shared_.agent->actuation();
  if (a.seq > *after || timeout_s <= 0.0 || shared_.long_polls >= config_.max_long_polls) {
    return Json(200, ActuationJson(a));
  }
  ++shared_.long_polls;
  net::Response r;
  r.park = net::Park{*after, timeout_s};
  return r;
}

net::Response Api::PostBudget(const net::Request& request, std::string_view query) {
  if (!query.empty()) return net::ErrorResponse(400, "query: /v1/budget takes none");
  auto budget_w = ParseBudget(request.body, shared_.gpus, shared_.budget_range_w);
  if (!budget_w) return net::ErrorResponse(400, budget_w.error().message());
  shared_.budget->Set(*budget_w, "POST /v1/budget");
  json j;
  j["ok"] = true;
  j["budget_per_gpu_w"] = *budget_w;
  j["job_budget_w"] = *budget_w * static_cast<double>(shared_.gpus);
  std::optional<double> floor_w;
  {
    MutexLock lock(shared_.mu);
    floor_w = shared_.agent->config().floor_w;
  }
  j["below_floor"] = floor_w && *budget_w < *floor_w;
  j["takes_effect"] = "at the next decision";
  return Json(200, Dump(j) + "\n");
}

net::Response Api::Report(const net::Request& request, std::string_view query) {
  if (!query.empty()) return net::ErrorResponse(400, "query: /v1/report takes none");
  auto report = ParseReport(request.body);
  if (!report) return net::ErrorResponse(400, report.error().message());
  MutexLock lock(shared_.mu);
  shared_.agent->Report(*report, shared_.now_s(), shared_.unix_s ? shared_.unix_s() : 0.0,
                        shared_.reports_checked);
  return Json(200, "{\"ok\": true}\n");
}

net::Response Api::History(std::string_view query) {
  const auto after = net::ParseAfterQuery(query, -1.0, "agent time in seconds");
  if (!after) return net::ErrorResponse(400, after.error().message());
  const double after_t_s = *after;
  std::vector<HistoryPoint> points;
  double budget_w = 0.0;
  {
    MutexLock lock(shared_.mu);
    points = shared_.agent->History(after_t_s);
    budget_w = shared_.agent->budget_w();
  }
  return Json(200, HistoryJson(points, budget_w));
}

net::Response Api::StatusOrMetrics(bool status_json, std::string_view query) {
  if (auto q = net::ParseQuery(query, {}); !q) return net::ErrorResponse(400, q.error().message());
  AgentStatus status;
  std::optional<net::ConnectionCounters> connections;
  {
    MutexLock lock(shared_.mu);
    status = shared_.agent->Status(shared_.now_s());
    status.long_polls_waiting = shared_.long_polls;
    if (shared_.gpus > 0) status.gpus = shared_.gpus;
    if (shared_.connections) connections = shared_.connections();
  }
  // Serialised outside the lock.
  std::optional<SiteHealth> site;
  if (shared_.site_health) site = shared_.site_health();
  if (status_json) return Json(200, StatusJson(status, connections, site));
  net::Response r;
  r.content_type = "text/plain; version=0.0.4";
  r.body = MetricsText(status, site);
  return r;
}

}  // namespace headroom::agent
