// A range of GPU power from Prometheus as a headroom trace: chunked queries through a
// PrometheusApi, and saved query_range answers (a JSON file).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "prom/api.h"
#include "prom/range_query.h"

namespace headroom::prom {

struct FetchOptions {
  int64_t max_points = kDefaultMaxPoints;  // instants per query, <= kPrometheusMaxPoints
  std::function<void(size_t done, size_t total)> on_chunk;
  // More series than this (0: no bound) is an error naming the server and --max-gpus: a
  // selector without a host filter on a large cluster answers one series per GPU.
  size_t max_series = 0;
};

// Every chunk of `query`, merged; t_s counts from the query's start. The resolution says the
// step and what it means (range_query.h).
Result<Trace> FetchRange(PrometheusApi& api, const RangeQuery& query, const FetchOptions& options);

// A saved query_range answer (`curl .../api/v1/query_range?... > FILE`). t_s counts from the
// first sample; the resolution is the median spacing of its samples.
Result<Trace> TraceFromSavedAnswer(std::string_view body, std::string_view name);

// What the numbers of a range at `step_ms` are, in words.
std::string ResolutionText(int64_t step_ms);

}  // namespace headroom::prom
