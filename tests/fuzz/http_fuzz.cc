// Fuzzes the agent's request handling behind the routes: raw bytes through Beast's HTTP parser
// (as the server parses them: the same header and body limits), every complete request into
// the Api, whose answers must keep their contracts whatever came in:
// - a status from the documented set, and a JSON body that parses whenever it says JSON;
// - a report accepted (200) only with the bearer token;
// - long-polls counted and uncounted exactly (none left waiting);
// - the strict query parsers never return a non-finite number.
#include <optional>
#include <utility>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "agent/agent.h"
#include "agent/api.h"
#include "agent/beast_request.h"
#include "agent/server.h"
#include "control/baselines.h"

namespace {

namespace http = boost::beast::http;
using namespace headroom;

struct World {
  World() : controller(8, 8) {
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
    api_config.token = "t0k";
    api_config.max_long_polls = 4;
    api_config.allowed_hosts = {"node-7"};
    api = std::make_unique<agent::Api>(shared, api_config);
  }
  control::Uncontrolled controller;
  std::unique_ptr<agent::Agent> core;
  agent::PostedBudget budget{300.0, "--budget-w"};
  agent::Shared shared;
  std::unique_ptr<agent::Api> api;
};

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World world;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto v = agent::ParseQueryReal(text)) Check(std::isfinite(*v));
  (void)agent::ParseQueryUint(text);
  (void)agent::ParseReport(text);
  if (size > 0 && (data[0] & 1) != 0) {  // now and then a decision, so that state moves
    telemetry::Sample s;
    s.t_s = 1.0;
    s.gpus.push_back({static_cast<double>(data[0]), false, {}, {}, {}, {}});
    MutexLock lock(world.shared.mu);
    world.core->Tick(1.0, s);
  }

  const agent::ServerLimits limits;
  boost::asio::const_buffer rest(data, size);
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
    const agent::ApiRequest request = agent::ToApiRequest(parser.get());
    agent::ApiResponse r = world.api->Handle(request);
    if (r.wait_after) {
      Check(r.wait_s > 0.0 && r.wait_s <= agent::kMaxLongPollS);
      r = world.api->EndLongPoll();
    }
    {
      MutexLock lock(world.shared.mu);
      Check(world.shared.long_polls == 0);
    }
    switch (r.status) {
      case 200:
      case 400:
      case 401:
      case 403:
      case 404:
      case 405:
      case 415:
        break;
      default:
        std::abort();
    }
    if (r.content_type == "application/json") {
      Check(nlohmann::json::accept(r.body));
    }
    if (request.method == "POST" && r.status == 200) {
      Check(request.authorization.has_value() &&
            request.authorization->find("t0k") != std::string_view::npos);
    }
    if (used == 0) break;
  }
  return 0;
}
