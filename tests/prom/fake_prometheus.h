// A Prometheus server's range queries, answered from memory with Prometheus's semantics
// (v2.42, promql/engine.go and web/api/v1/api.go), for tests of prom/fetch.h:
//
// - the query is evaluated at start, start + step, ... <= end; at each instant a series has the
//   latest raw sample at or before it within the 5-minute lookback, else no point there;
// - a query with (end - start) / step > 11,000 is refused as Prometheus refuses it (HTTP 400,
//   errorType bad_data; the body is what http_api.cc hands back for a 400), as are a step <= 0
//   and an end before the start;
// - series without a point in the range are left out; the others come sorted by their labels,
//   each as {"metric": {...}, "values": [[seconds, "value"], ...]}, times as JSON numbers of
//   seconds (to the millisecond), values as strings ("NaN", "+Inf" as Prometheus writes them).
//
// The query is matched only as a metric name against `__name__` (anything from '{' on is
// ignored). Not thread-safe: one test thread.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "prom/api.h"
#include "prom/range_query.h"

namespace headroom::prom::test {

class FakePrometheus final : public PrometheusApi {
 public:
  using Labels = std::map<std::string, std::string>;

  static constexpr int64_t kLookbackMs = 5 * 60 * 1000;
  // Prometheus refuses a range whose (end - start) / step, in whole steps, exceeds this.
  static constexpr int64_t kMaxResolution = 11000;
  static constexpr const char* kName = "prometheus://fake:9090";

  // Appends a raw (scraped) sample. REQUIRES: t_ms increases per series; labels hold __name__.
  void Add(const Labels& labels, int64_t t_ms, double value) {
    auto& samples = series_[labels];
    if (!samples.empty() && samples.back().first >= t_ms) std::abort();
    samples.emplace_back(t_ms, value);
  }

  // The call with this 1-based number answers an Io error instead (a server gone).
  void FailCall(int call) { fail_call_ = call; }

  int calls() const { return static_cast<int>(queries_.size()); }
  const std::vector<RangeQuery>& queries() const { return queries_; }

  std::string Name() const override { return kName; }

  Result<std::string> QueryRange(const RangeQuery& q) override {
    queries_.push_back(q);
    if (fail_call_ && *fail_call_ == calls()) {
      return Error::Io(fmt::format("{}: cannot query: Connection", kName));
    }
    if (q.step_ms <= 0) {
      return ErrorBody(
          "zero or negative query resolution step widths are not accepted. Try a positive "
          "integer");
    }
    if (q.end_ms < q.start_ms) return ErrorBody("end timestamp must not be before start time");
    if ((q.end_ms - q.start_ms) / q.step_ms > kMaxResolution) {
      return ErrorBody(
          "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query "
          "resolution (?step=XX)");
    }
    const std::string metric = q.query.substr(0, q.query.find('{'));
    std::string out = R"({"status":"success","data":{"resultType":"matrix","result":[)";
    bool first_series = true;
    for (const auto& [labels, samples] : series_) {
      const auto name = labels.find("__name__");
      if (name == labels.end() || name->second != metric) continue;
      std::string values;
      size_t next = 0;  // the first sample after the previous instant
      for (int64_t t = q.start_ms; t <= q.end_ms; t += q.step_ms) {
        while (next < samples.size() && samples[next].first <= t) ++next;
        if (next == 0 || t - samples[next - 1].first > kLookbackMs) continue;
        if (!values.empty()) values += ',';
        values += fmt::format(R"([{},"{}"])", SecondsText(t), ValueText(samples[next - 1].second));
      }
      if (values.empty()) continue;
      if (!first_series) out += ',';
      first_series = false;
      out += fmt::format(R"({{"metric":{},"values":[{}]}})", nlohmann::json(labels).dump(), values);
    }
    return out + "]}}";
  }

  // Seconds as Prometheus writes a time: whole, or with three decimals.
  static std::string SecondsText(int64_t ms) {
    return ms % 1000 == 0 ? fmt::format("{}", ms / 1000)
                          : fmt::format("{}.{:03}", ms / 1000, ms % 1000);
  }

 private:
  static std::string ErrorBody(const std::string& message) {
    return nlohmann::json{{"status", "error"}, {"errorType", "bad_data"}, {"error", message}}
        .dump();
  }
  static std::string ValueText(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    return fmt::format("{}", v);
  }

  std::map<Labels, std::vector<std::pair<int64_t, double>>> series_;
  std::vector<RangeQuery> queries_;
  std::optional<int> fail_call_;
};

}  // namespace headroom::prom::test
