// Fuzzes both daemons' request handling behind the shared transport: raw bytes through Beast's
// HTTP parser (as net::Server parses them: the same header and body limits, the same framing
// rules), every complete request into the agent's Api or the coordinator's, whose answers must
// keep their contracts whatever came in. The first byte chooses (bit 1: the coordinator; bit 0:
// a decision or a period first, so that state moves; the corpus names them "a" and "c"), the
// rest is what a client sends:
// - a request with ambiguous framing (net::FramingError) never reaches a handler;
// - a status from the documented set, and a JSON body that parses whenever it says JSON;
// - a write accepted (the agent's 200, the coordinator's 202) only with the bearer token;
// - long-polls counted and uncounted exactly (none left waiting);
// - the strict query parsers never return a non-finite number.
#include <optional>
#include <utility>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string_view>

#include "agent/agent.h"
#include "agent/api.h"
#include "control/baselines.h"
#include "coord/memory_store.h"
#include "coord_server/coordinator_server.h"
#include "net/beast_request.h"
#include "net/query.h"
#include "net/server.h"

namespace {

namespace http = boost::beast::http;
using namespace headroom;

constexpr size_t kStoreHistory = 1000;  // the store's watch history: bounded for a long run

struct AgentWorld {
  AgentWorld() : controller(8, 8) {
    agent::AgentConfig config;
    config.budget_w = 300.0;
    config.limits.concurrency = {1, 64};
    config.limits.group_size = {4, 16};
    core = std::make_unique<agent::Agent>(config, controller);
    shared.agent = core.get();
    shared.now_s = [] { return 1.0; };
    shared.budget = &budget;
    shared.gpus = 4;
    agent::ApiConfig api_config;
    api_config.access.token = "t0k";
    api_config.access.allowed_hosts = {"node-7"};
    api_config.max_long_polls = 4;
    api = std::make_unique<agent::Api>(shared, api_config);
  }
  control::Uncontrolled controller;
  std::unique_ptr<agent::Agent> core;
  agent::PostedBudget budget{300.0, "--budget-w"};
  agent::Shared shared;
  std::unique_ptr<agent::Api> api;
};

// A replica that leads its site on an in-memory store, with one member.
struct CoordinatorWorld {
  CoordinatorWorld() : store([this] { return now_s; }, kStoreHistory) {
    coord::CoordinatorConfig config;
    config.site = "s";
    config.site_budget_w = 1000.0;
    config.reserve_w = 100.0;
    config.id = "c0";
    config.listen = "127.0.0.1:10471";
    host = std::make_unique<coord_server::CoordinatorHost>(
        store, config, [this] { return now_s; }, [](const std::string&) {});
    host->Step();
    net::AccessPolicy access;
    access.token = "t0k";
    access.allowed_hosts = {"coord-1"};
    api = std::make_unique<coord_server::CoordinatorApi>(*host, access,
                                                         [] { return net::ConnectionCounters{}; });
  }
  double now_s = 0.0;
  coord::MemoryStore store;
  std::unique_ptr<coord_server::CoordinatorHost> host;
  std::unique_ptr<coord_server::CoordinatorApi> api;
};

void Check(bool ok) {
  if (!ok) std::abort();
}

bool OneOf(int status, std::initializer_list<int> allowed) {
  for (int s : allowed) {
    if (s == status) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static AgentWorld agent_world;
  static CoordinatorWorld coord_world;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto v = net::ParseQueryReal(text)) Check(std::isfinite(*v));
  (void)net::ParseQueryUint(text);
  (void)agent::ParseReport(text);
  (void)coord_server::ParseSiteBudgetBody(text);
  if (size == 0) return 0;
  const bool coordinator = (data[0] & 2) != 0;
  if ((data[0] & 1) != 0) {
    if (coordinator) {
      coord_world.now_s += 1.0;
      coord_world.host->Step();
    } else {
      telemetry::Sample s;
      s.t_s = 1.0;
      s.gpus.push_back({static_cast<double>(size % 512), false, {}, {}, {}, {}});
      MutexLock lock(agent_world.shared.mu);
      agent_world.core->Tick(1.0, s);
    }
  }
  net::Handler& handler =
      coordinator ? static_cast<net::Handler&>(*coord_world.api) : *agent_world.api;
  const net::ServerLimits limits =
      coordinator ? coord_server::CoordinatorLimits() : net::ServerLimits{};

  boost::asio::const_buffer rest(data + 1, size - 1);
  for (int requests = 0; requests < 8 && rest.size() > 0; ++requests) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
    parser.body_limit(limits.max_body_bytes);
    parser.eager(true);
    boost::beast::error_code ec;
    const size_t used = parser.put(rest, ec);
    rest += used;
    if (ec == http::error::need_more && parser.is_header_done() && !parser.is_done()) {
      parser.put_eof(ec);  // the client closed: a body cut short is an error, not a request
    }
    if (ec || !parser.is_done()) break;
    if (net::FramingError(parser.get())) break;  // 400, and the server closes the connection
    const net::Request request = net::ToRequest(parser.get());
    // The transport's contract: one header of each that framing and policy read.
    Check(parser.get().count(http::field::host) <= 1);
    Check(parser.get().count(http::field::content_length) <= 1);
    net::Response r = handler.Handle(request);
    if (r.park) {
      Check(!coordinator);
      Check(r.park->wait_s > 0.0 && r.park->wait_s <= agent::kMaxLongPollS);
      r = handler.EndPark(r.park->after);
    }
    if (r.offload) {
      Check(coordinator && request.method == "POST");
      r = r.offload();  // what the server's worker runs
      Check(!r.offload && !r.park);
    }
    {
      MutexLock lock(agent_world.shared.mu);
      Check(agent_world.shared.long_polls == 0);
    }
    Check(coordinator ? OneOf(r.status, {200, 202, 400, 401, 403, 404, 405, 409, 415, 503})
                      : OneOf(r.status, {200, 400, 401, 403, 404, 405, 415}));
    if (r.content_type == "application/json") {
      Check(nlohmann::json::accept(r.body));
    }
    if (request.method == "POST" && (r.status == 200 || r.status == 202)) {
      Check(request.authorization.has_value() &&
            request.authorization->find("t0k") != std::string_view::npos);
    }
    if (coordinator && r.status == 202) {
      const auto j = nlohmann::json::parse(r.body);
      Check(j.size() == 3 && j.contains("revision") && j.contains("target_site_budget_w") &&
            j.contains("reserve_w"));
    }
    if (used == 0) break;
  }
  return 0;
}
