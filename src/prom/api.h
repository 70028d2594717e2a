// A Prometheus server's range queries, behind one interface: http_api.h talks to a real server;
// tests answer from memory with Prometheus's semantics (tests/prom/fake_prometheus.h).
#pragma once

#include <string>

#include "common/error.h"
#include "prom/range_query.h"

namespace headroom::prom {

class PrometheusApi {
 public:
  virtual ~PrometheusApi() = default;
  // The body of GET /api/v1/query_range for `query` (a chunk: at most kPrometheusMaxPoints
  // instants); an error when the server cannot be reached or does not answer 200 or 4xx with a
  // JSON body (Prometheus answers a bad query 400 with {"status": "error", ...}).
  virtual Result<std::string> QueryRange(const RangeQuery& query) = 0;
  // Where it asks, for messages ("prometheus://127.0.0.1:9090").
  virtual std::string Name() const = 0;
};

}  // namespace headroom::prom
