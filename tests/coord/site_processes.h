// What the tests that run a site's real processes share: a coordinator's /v1/status as JSON.
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <optional>

namespace headroom::coord {

// GET /v1/status of the coordinator on 127.0.0.1:port; nullopt when it does not answer 200
// with a JSON object.
inline std::optional<nlohmann::json> StatusOf(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1);
  c.set_read_timeout(2);
  httplib::Result res = c.Get("/v1/status");
  if (!res || res->status != 200) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  return j;
}

}  // namespace headroom::coord
