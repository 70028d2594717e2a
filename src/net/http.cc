#include "net/http.h"

#include <nlohmann/json.hpp>

namespace headroom::net {

Response JsonResponse(int status, std::string body) {
  Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

Response ErrorResponse(int status, std::string_view message) {
  using nlohmann::json;
  // Never throws on text a client sent: invalid UTF-8 is replaced, not an exception.
  return JsonResponse(status, json{{"error", std::string(message)}}.dump(
                                  -1, ' ', false, json::error_handler_t::replace) +
                                  "\n");
}

Response MethodNotAllowed(std::string allow) {
  Response r = ErrorResponse(405, "method not allowed; this path takes " + allow);
  r.headers.emplace_back("Allow", std::move(allow));
  return r;
}

Response Unavailable(std::string_view message) {
  Response r = ErrorResponse(503, message);
  r.headers.emplace_back("Retry-After", "1");
  return r;
}

void to_json(nlohmann::json& j, const ConnectionCounters& c) {
  j = nlohmann::json{{"open", c.open},         {"idle", c.idle},       {"accepted", c.accepted},
                     {"refused", c.refused},   {"evicted", c.evicted}, {"timed_out", c.timed_out},
                     {"requests", c.requests}, {"busy", c.busy}};
}

bool Handler::Ready(uint64_t) { return true; }

Response Handler::EndPark(uint64_t) { return ErrorResponse(500, "internal error: parked"); }

}  // namespace headroom::net
