// GPU power from Prometheus: the range queries of its HTTP API (/api/v1/query_range), and the
// JSON it answers, as one headroom trace. No I/O: api.h is the interface to a server,
// http_api.h the one file that talks to one.
//
// What the numbers are. A range query does not return the scraped samples: Prometheus evaluates
// the query at start, start + step, ..., end, each time taking the latest sample at or before
// that instant (within its lookback, 5 min by default). At a step equal to the scrape interval,
// with the instants on the scrapes' timestamps, that is the scraped signal; at a finer step a
// sample repeats; at a coarser one samples are skipped (not averaged). The trace made here is at
// the query's step, and says so (Trace::resolution).
//
// One series per GPU, named from its labels: `gpu` (the DCGM exporter's GPU index, also the
// agent's `headroom_power_watts`), prefixed by the host -- `Hostname` (DCGM), else `instance`
// (Prometheus's scrape target) -- when the answer holds more than one host; without `gpu`, the
// `UUID`; without either, all the series' labels. Two series with one name are an error.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace headroom::prom {

// Prometheus refuses a range query of more than 11,000 points per series; chunks stay below.
inline constexpr int64_t kPrometheusMaxPoints = 11000;
inline constexpr int64_t kDefaultMaxPoints = 10000;

// Times in milliseconds since the Unix epoch: Prometheus's own resolution.
struct RangeQuery {
  std::string query;
  int64_t start_ms = 0;
  int64_t end_ms = 0;
  int64_t step_ms = 0;
};

// A time as the Prometheus API takes it: Unix seconds (decimal, to the millisecond) or RFC 3339
// ("2026-12-02T10:00:00Z", "2026-12-02T10:00:00.5+01:00"). `what` names the flag in messages.
Result<int64_t> ParseTimeMs(std::string_view text, std::string_view what);

// Checks the query (end after start, step > 0, a query) and splits it into consecutive chunks of
// at most `max_points` instants each, every instant start + k step once, in order.
Result<std::vector<RangeQuery>> ChunkRange(const RangeQuery& query, int64_t max_points);

struct Series {
  std::map<std::string, std::string> labels;
  std::vector<int64_t> t_ms;
  std::vector<double> value;
};

// The body of a query_range answer ({"status": "success", "data": {"resultType": "matrix",
// ...}}): its series, in the answer's order. An error answer, another result type, a value that
// is not a finite number, or times out of order are an error naming `name` and the series.
Result<std::vector<Series>> ParseMatrix(std::string_view body, std::string_view name);

// An answer to `asked` holds only its instants: start + k x step, from start to end. Any other
// time (a server answering another range, or the same range to every chunk) is an error naming
// `name`, the series and the time: joined, such chunks would repeat or widen the range.
Status CheckAnswerTimes(const std::vector<Series>& series, const RangeQuery& asked,
                        std::string_view name);

// Appends each chunk's series to the whole: the same label set is the same series, its points
// in time order (a chunk's first instant follows the previous chunk's last).
void MergeSeries(std::vector<Series>&& chunk, std::vector<Series>* all);

// What a trace made from a range answers.
struct Trace {
  std::string csv;         // headroom's long CSV: t_s,gpu,power_w
  std::string resolution;  // in words, for the output
  int64_t t0_ms = 0;       // the time t_s counts from
  size_t series = 0;
  size_t samples = 0;
};

// The long CSV of `series` (t_s from `t0_ms`), named as above. `resolution` is said as given.
// No series, or two with one name, are an error naming `name`.
Result<Trace> ToTrace(const std::vector<Series>& series, int64_t t0_ms, std::string resolution,
                      std::string_view name);

// The GPU names of `series` (above), in order; an error naming `name` when two are the same.
Result<std::vector<std::string>> SeriesNames(const std::vector<Series>& series,
                                             std::string_view name);

}  // namespace headroom::prom
