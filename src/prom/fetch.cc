#include "prom/fetch.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <vector>

namespace headroom::prom {

std::string ResolutionText(int64_t step_ms) {
  return fmt::format(
      "Prometheus range query at step {:g} s: each sample is the latest scraped value at or "
      "before its instant, not the raw signal",
      static_cast<double>(step_ms) / 1000.0);
}

Result<Trace> FetchRange(PrometheusApi& api, const RangeQuery& query, const FetchOptions& options) {
  if (options.max_points < 1 || options.max_points > kPrometheusMaxPoints) {
    return Error::Usage(fmt::format("points per query: in [1, {}]", kPrometheusMaxPoints));
  }
  auto chunks = ChunkRange(query, options.max_points);
  if (!chunks) return std::move(chunks).error();
  std::vector<Series> all;
  for (size_t k = 0; k < chunks->size(); ++k) {
    auto body = api.QueryRange((*chunks)[k]);
    if (!body) return std::move(body).error();
    auto series = ParseMatrix(*body, api.Name());
    if (!series) return std::move(series).error();
    if (auto in_range = CheckAnswerTimes(*series, (*chunks)[k], api.Name()); !in_range) {
      return std::move(in_range).error();
    }
    MergeSeries(std::move(*series), &all);
    if (options.max_series > 0 && all.size() > options.max_series) {
      return Error::Input(fmt::format(
          "{}: the query answered {} series, more than {} GPUs, the bound on GPUs per trace "
          "(narrow --query, e.g. to one host, or raise --max-gpus)",
          api.Name(), all.size(), options.max_series));
    }
    if (options.on_chunk) options.on_chunk(k + 1, chunks->size());
  }
  // In Prometheus's order of one answer (sorted by labels): a series missing from the first
  // chunks would otherwise come last, and the trace would depend on the chunking.
  std::sort(all.begin(), all.end(),
            [](const Series& a, const Series& b) { return a.labels < b.labels; });
  return ToTrace(all, query.start_ms, ResolutionText(query.step_ms), api.Name());
}

Result<Trace> TraceFromSavedAnswer(std::string_view body, std::string_view name) {
  auto series = ParseMatrix(body, name);
  if (!series) return std::move(series).error();
  int64_t t0 = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> gaps;
  for (const Series& s : *series) {
    if (!s.t_ms.empty()) t0 = std::min(t0, s.t_ms.front());
    for (size_t i = 1; i < s.t_ms.size(); ++i) gaps.push_back(s.t_ms[i] - s.t_ms[i - 1]);
  }
  std::string resolution = "a saved Prometheus range answer (one sample per GPU)";
  if (!gaps.empty()) {
    std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2),
                     gaps.end());
    resolution = fmt::format(
        "a saved Prometheus range answer, samples {:g} s apart (median): each is the latest "
        "scraped value at or before its instant, not the raw signal",
        static_cast<double>(gaps[gaps.size() / 2]) / 1000.0);
  }
  if (t0 == std::numeric_limits<int64_t>::max()) t0 = 0;
  return ToTrace(*series, t0, std::move(resolution), name);
}

}  // namespace headroom::prom
