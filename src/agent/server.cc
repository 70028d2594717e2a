#include "agent/server.h"

#include "agent/dashboard.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace headroom::agent {

namespace {

using nlohmann::json;

std::optional<control::Phase> PhaseFromName(const std::string& name) {
  for (int p = 0; p < control::kPhaseCount; ++p) {
    const auto phase = static_cast<control::Phase>(p);
    if (control::PhaseName(phase) == name) return phase;
  }
  return std::nullopt;
}

void Fail(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(json{{"error", message}}.dump() + "\n", "application/json");
}

}  // namespace

std::string ActuationJson(const Actuation& a) {
  return json{{"concurrency", a.concurrency},
              {"group_size", a.group_size},
              {"seq", a.seq},
              {"valid_for_s", a.valid_for_s},
              {"reason", a.reason}}
             .dump() +
         "\n";
}

std::string StatusJson(const AgentStatus& s) {
  json j;
  j["t_s"] = s.t_s;
  j["power_w"] = s.power_w;
  j["job_power_w"] = s.job_power_w;
  j["actuation"] = json::parse(ActuationJson(s.actuation));
  j["decisions"] = s.decisions;
  j["telemetry_errors"] = s.telemetry_errors;
  j["safe_decisions"] = s.safe_decisions;
  j["tokens_per_s"] = s.tokens_per_s;
  j["report_age_s"] = s.report_age_s < 0.0 ? json(nullptr) : json(s.report_age_s);
  if (s.report) {
    j["report"] = {{"step", s.report->step},
                   {"phase", control::PhaseName(s.report->phase)},
                   {"tokens", s.report->tokens},
                   {"in_flight", s.report->in_flight}};
  }
  j["budget_w"] = s.budget_w;
  j["violation_fraction"] = {{"0.5s", s.violation_fraction[0]},
                             {"30s", s.violation_fraction[1]},
                             {"5min", s.violation_fraction[2]}};
  j["windows"] = {{"0.5s", s.windows[0]}, {"30s", s.windows[1]}, {"5min", s.windows[2]}};
  j["long_polls_waiting"] = s.long_polls_waiting;
  j["decision_latency_s"] = {{"p50", s.decision_p50_s},
                             {"p99", s.decision_p99_s},
                             {"max", s.decision_max_s},
                             {"samples", s.latency_samples}};
  return j.dump() + "\n";
}

std::string MetricsText(const AgentStatus& s, double budget_w) {
  std::string out;
  out +=
      "# HELP headroom_power_watts Telemetry power per GPU.\n# TYPE headroom_power_watts gauge\n";
  for (size_t g = 0; g < s.power_w.size(); ++g) {
    out += fmt::format("headroom_power_watts{{gpu=\"{}\"}} {}\n", g, s.power_w[g]);
  }
  out += fmt::format(
      "# HELP headroom_budget_watts Budget per GPU.\n# TYPE headroom_budget_watts gauge\n"
      "headroom_budget_watts {}\n",
      budget_w);
  out += fmt::format(
      "# HELP headroom_concurrency Generation concurrency decided.\n"
      "# TYPE headroom_concurrency gauge\nheadroom_concurrency {}\n"
      "# HELP headroom_group_size Group size decided.\n# TYPE headroom_group_size gauge\n"
      "headroom_group_size {}\n",
      s.actuation.concurrency, s.actuation.group_size);
  out +=
      "# HELP headroom_violation_fraction Windows over budget / windows, on telemetry.\n"
      "# TYPE headroom_violation_fraction gauge\n";
  const char* names[] = {"0.5s", "30s", "5min"};
  for (size_t i = 0; i < 3; ++i) {
    out += fmt::format("headroom_violation_fraction{{window=\"{}\"}} {}\n", names[i],
                       s.violation_fraction[i]);
  }
  out += fmt::format(
      "# HELP headroom_decisions_total Control decisions.\n# TYPE headroom_decisions_total "
      "counter\nheadroom_decisions_total {}\n"
      "# HELP headroom_telemetry_errors_total Failed or stale telemetry reads.\n"
      "# TYPE headroom_telemetry_errors_total counter\nheadroom_telemetry_errors_total {}\n"
      "# HELP headroom_tokens_per_second Tokens per second reported by the trainer.\n"
      "# TYPE headroom_tokens_per_second gauge\nheadroom_tokens_per_second {}\n",
      s.decisions, s.telemetry_errors, s.tokens_per_s);
  out += fmt::format(
      "# HELP headroom_decision_latency_seconds Telemetry read + decision + publication, over "
      "the last {} decisions.\n# TYPE headroom_decision_latency_seconds summary\n"
      "headroom_decision_latency_seconds{{quantile=\"0.5\"}} {}\n"
      "headroom_decision_latency_seconds{{quantile=\"0.99\"}} {}\n"
      "headroom_decision_latency_seconds_sum {}\n"
      "headroom_decision_latency_seconds_count {}\n",
      kLatencyKeep, s.decision_p50_s, s.decision_p99_s, s.latency_sum_s, s.latency_samples);
  return out;
}

std::string HistoryJson(const std::vector<HistoryPoint>& points, double budget_w) {
  json j;
  j["budget_w"] = budget_w;
  json& out = j["points"] = json::array();
  for (const HistoryPoint& p : points) {
    out.push_back({{"t_s", p.t_s},
                   {"power_w", p.power_w.empty() ? json(nullptr) : json(p.power_w)},
                   {"concurrency", p.concurrency},
                   {"group_size", p.group_size},
                   {"tokens_per_s", p.tokens_per_s}});
  }
  return j.dump() + "\n";
}

Result<TrainerReport> ParseReport(const std::string& body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    return Error::Input(fmt::format("body is not JSON: {}", e.what()));
  }
  if (!j.is_object()) return Error::Input("body: expected a JSON object");
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
  const auto phase = PhaseFromName(j["phase"].get<std::string>());
  if (!phase) {
    return Error::Input("field 'phase': one of idle, rollout, logprob, train, sync, checkpoint");
  }
  r.phase = *phase;
  if (j.contains("progress")) {
    if (!j["progress"].is_number() || j["progress"].get<double>() < 0.0 ||
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
  return r;
}

Result<std::pair<std::string, int>> ParseListen(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return Error::Usage(fmt::format("--listen: '{}': expected HOST:PORT", text));
  }
  int port = -1;
  try {
    size_t used = 0;
    port = std::stoi(text.substr(colon + 1), &used);
    if (used != text.size() - colon - 1) port = -1;
  } catch (...) {
    port = -1;
  }
  if (port < 0 || port > 65535) {
    return Error::Usage(fmt::format("--listen: '{}': the port must be 0-65535", text));
  }
  return std::make_pair(text.substr(0, colon), port);
}

Server::Server(Shared& shared, std::string token)
    : shared_(shared), token_(std::move(token)), http_(std::make_unique<httplib::Server>()) {
  httplib::Server& s = *http_;
  s.set_payload_max_length(kMaxBodyBytes);
  // A worker per open connection: long-polling trainers hold theirs for up to 30 s, so the pool
  // is far larger than httplib's default (cores - 1, at least 8); idle workers cost no CPU.
  s.new_task_queue = [] { return new httplib::ThreadPool(kServerThreads); };
  s.set_tcp_nodelay(true);  // small JSON answers: no Nagle delay against the client's ACK
  s.set_keep_alive_max_count(1000);
  s.set_read_timeout(5, 0);
  s.set_write_timeout(5, 0);

  s.Get("/v1/actuation", [this](const httplib::Request& req, httplib::Response& res) {
    std::unique_lock lock(shared_.mu);
    if (req.has_param("after")) {
      uint64_t after = 0;
      double timeout_s = 10.0;
      try {
        after = std::stoull(req.get_param_value("after"));
        if (req.has_param("timeout_s")) timeout_s = std::stod(req.get_param_value("timeout_s"));
      } catch (...) {
        lock.unlock();
        return Fail(res, 400, "after: expected a sequence number; timeout_s: seconds");
      }
      timeout_s = std::clamp(timeout_s, 0.0, 30.0);
      if (shared_.long_polls < kMaxLongPolls) {
        ++shared_.long_polls;
        shared_.cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] {
          return shared_.stopping || shared_.agent->actuation().seq > after;
        });
        --shared_.long_polls;
      }
    }
    res.set_content(ActuationJson(shared_.agent->actuation()), "application/json");
  });
  s.Post("/v1/report", [this](const httplib::Request& req, httplib::Response& res) {
    if (!token_.empty() && req.get_header_value("Authorization") != "Bearer " + token_) {
      return Fail(res, 401, "a bearer token is required");
    }
    auto report = ParseReport(req.body);
    if (!report) return Fail(res, 400, report.error().message());
    std::lock_guard lock(shared_.mu);
    shared_.agent->Report(*report, shared_.now_s());
    res.set_content("{\"ok\": true}\n", "application/json");
  });
  s.Get("/v1/status", [this](const httplib::Request&, httplib::Response& res) {
    AgentStatus status;
    {
      std::lock_guard lock(shared_.mu);
      status = shared_.agent->Status(shared_.now_s());
      status.long_polls_waiting = shared_.long_polls;
    }
    res.set_content(StatusJson(status), "application/json");  // serialised outside the lock
  });
  s.Get("/v1/history", [this](const httplib::Request& req, httplib::Response& res) {
    double after_t_s = -1.0;
    if (req.has_param("after")) {
      const std::string text = req.get_param_value("after");
      char* end = nullptr;
      after_t_s = std::strtod(text.c_str(), &end);
      if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(after_t_s)) {
        return Fail(res, 400, "after: expected agent time in seconds");
      }
    }
    std::vector<HistoryPoint> points;
    {
      std::lock_guard lock(shared_.mu);
      points = shared_.agent->History(after_t_s);
    }
    res.set_content(HistoryJson(points, shared_.agent->config().budget_w), "application/json");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    AgentStatus status;
    {
      std::lock_guard lock(shared_.mu);
      status = shared_.agent->Status(shared_.now_s());
    }
    res.set_content(MetricsText(status, status.budget_w), "text/plain; version=0.0.4");
  });
  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    // Self-contained: the page's scripts and styles are inline, and it talks only to this agent.
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                   "connect-src 'self'; img-src 'self' data:");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_content(kDashboardHtml.data(), kDashboardHtml.size(), "text/html; charset=utf-8");
  });
}

Server::~Server() { Stop(); }

Status Server::Start(const std::string& host, int port) {
  if (port == 0) {
    port_ = http_->bind_to_any_port(host.c_str());
    if (port_ <= 0) return Error::Io(fmt::format("agent: cannot bind {}", host));
  } else {
    if (!http_->bind_to_port(host.c_str(), port)) {
      return Error::Io(
          fmt::format("agent: cannot bind {}:{} (in use, or not an address here)", host, port));
    }
    port_ = port;
  }
  thread_ = std::thread([this] { http_->listen_after_bind(); });
  // Stop() before the loop runs would be lost (httplib 0.11 has no wait_until_ready): wait for
  // the accept loop, which starts at once.
  while (!http_->is_running()) std::this_thread::yield();
  return OkStatus();
}

void Server::Stop() {
  {
    std::lock_guard lock(shared_.mu);
    shared_.stopping = true;
  }
  shared_.cv.notify_all();
  if (http_) http_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace headroom::agent
