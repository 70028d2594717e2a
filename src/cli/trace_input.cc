#include "cli/trace_input.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/numbers.h"
#include "common/duration.h"
#include "common/read_file.h"
#include "prom/fetch.h"
#include "prom/http_api.h"

namespace headroom::cli {
namespace {

// A saved answer larger than this is refused (a range query's answer is bounded by Prometheus's
// points per series; 512 MiB is far more than any GPU fleet's day at 1 s).
constexpr uintmax_t kMaxSavedAnswerBytes = uintmax_t{512} << 20;

// A long CSV made in memory, owned by its source.
class TextSource final : public trace::ByteSource {
 public:
  explicit TextSource(std::string text) : text_(std::move(text)), inner_(text_) {}
  TextSource(const TextSource&) = delete;
  TextSource& operator=(const TextSource&) = delete;
  Result<size_t> Read(char* buffer, size_t capacity) override {
    return inner_.Read(buffer, capacity);
  }
  std::optional<uint64_t> SizeBytes() const override { return inner_.SizeBytes(); }
  Result<std::optional<std::string_view>> View(uint64_t offset, size_t want) override {
    return inner_.View(offset, want);
  }

 private:
  std::string text_;
  trace::MemorySource inner_;
};

bool EndsWithJson(const std::string& path) {
  if (path.size() < 5) return false;
  std::string tail = path.substr(path.size() - 5);
  std::transform(tail.begin(), tail.end(), tail.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return tail == ".json";
}

OpenedTrace FromTrace(prom::Trace trace, std::string format) {
  OpenedTrace out;
  out.source = std::make_unique<TextSource>(std::move(trace.csv));
  out.format = std::move(format);
  out.resolution = std::move(trace.resolution);
  out.made_in_memory = true;
  return out;
}

}  // namespace

bool IsPrometheusUrl(const std::string& arg) { return prom::IsPrometheusUrl(arg); }
bool IsPrometheusInput(const std::string& arg) { return IsPrometheusUrl(arg) || EndsWithJson(arg); }

void PrometheusOptions::Register(CLI::App& app) {
  app.add_option("--query", queries,
                 "For a prometheus://HOST:PORT TRACE: the PromQL of GPU power per GPU, e.g. "
                 "'DCGM_FI_DEV_POWER_USAGE{Hostname=\"node1\"}' (once for all such TRACEs, or "
                 "once per TRACE in order)");
  app.add_option("--start", start,
                 "For prometheus://: the range's start, Unix seconds or RFC 3339");
  app.add_option("--end", end, "For prometheus://: the range's end, Unix seconds or RFC 3339");
  app.add_option("--step", step,
                 "For prometheus://: the query's step (its resolution: Prometheus resamples to "
                 "it, the latest scraped value at each step)")
      ->capture_default_str();
  app.add_option("--prometheus-max-points", max_points,
                 "For prometheus://: steps per query; longer ranges are asked in chunks "
                 "(Prometheus refuses more than 11,000)")
      ->check(Integer(1, prom::kPrometheusMaxPoints))
      ->capture_default_str();
  app.add_option("--prometheus-timeout-s", timeout_s,
                 "For prometheus://: the deadline of each query, whole (connect to last byte), s")
      ->check(Real(0.1, 3600.0))
      ->capture_default_str();
  app.add_option("--prometheus-token-file", token_file,
                 "For prometheus://: a file holding a bearer token for the server");
}

Status PrometheusOptions::Check(size_t urls) const {
  if (urls == 0) {
    if (!queries.empty() || !start.empty() || !end.empty() || !token_file.empty()) {
      return Error::Usage(
          "--query, --start, --end and --prometheus-token-file are for a "
          "prometheus://HOST:PORT TRACE; none was given");
    }
    return OkStatus();
  }
  if (queries.empty()) return Error::Usage("prometheus:// TRACE: give --query");
  if (queries.size() != 1 && queries.size() != urls) {
    return Error::Usage(fmt::format(
        "--query: {} given for {} prometheus:// TRACEs: give one for all, or one per TRACE",
        queries.size(), urls));
  }
  if (start.empty() || end.empty())
    return Error::Usage("prometheus:// TRACE: give --start and --end");
  return OkStatus();
}

Result<OpenedTrace> OpenTrace(const std::string& arg, size_t index,
                              const PrometheusOptions& prometheus, size_t max_gpus,
                              const std::function<void(size_t, size_t)>& on_chunk) {
  if (IsPrometheusUrl(arg)) {
    auto endpoint = prom::ParseEndpoint(arg);
    if (!endpoint) return std::move(endpoint).error();
    prom::RangeQuery q;
    q.query =
        prometheus.queries.size() == 1 ? prometheus.queries.front() : prometheus.queries.at(index);
    auto start = prom::ParseTimeMs(prometheus.start, "--start");
    if (!start) return std::move(start).error();
    auto end = prom::ParseTimeMs(prometheus.end, "--end");
    if (!end) return std::move(end).error();
    auto step_s = ParseDurationS(prometheus.step);
    if (!step_s) return Error::Usage(fmt::format("--step: {}", step_s.error().message()));
    const double step_ms = *step_s * 1000.0;
    if (step_ms < 1.0 || std::abs(step_ms - std::round(step_ms)) > 1e-6 || step_ms > 86400e3) {
      return Error::Usage(fmt::format(
          "--step {}: a whole number of milliseconds from 1 ms to 1 day (Prometheus's resolution)",
          prometheus.step));
    }
    q.start_ms = *start;
    q.end_ms = *end;
    q.step_ms = std::llround(step_ms);
    prom::HttpOptions http;
    http.timeout_s = prometheus.timeout_s;
    if (!prometheus.token_file.empty()) {
      auto token = ReadRegularFileCapped(prometheus.token_file, kMaxSmallFileBytes,
                                         "--prometheus-token-file");
      if (!token) return std::move(token).error();
      http.bearer_token = std::move(*token);
      while (!http.bearer_token.empty() &&
             (http.bearer_token.back() == '\n' || http.bearer_token.back() == '\r')) {
        http.bearer_token.pop_back();
      }
      if (http.bearer_token.empty() ||
          http.bearer_token.find_first_of("\r\n") != std::string::npos) {
        return Error::Input(fmt::format("--prometheus-token-file {}: one line holding the token",
                                        prometheus.token_file));
      }
    }
    auto api = prom::MakeHttpApi(*endpoint, http);
    prom::FetchOptions options;
    options.max_points = prometheus.max_points;
    options.max_series = max_gpus;
    options.on_chunk = on_chunk;
    auto trace = prom::FetchRange(*api, q, options);
    if (!trace) return std::move(trace).error();
    return FromTrace(std::move(*trace), "prometheus");
  }
  if (EndsWithJson(arg)) {
    auto text = ReadFileCapped(arg, kMaxSavedAnswerBytes, "a saved Prometheus answer");
    if (!text) return std::move(text).error();
    auto trace = prom::TraceFromSavedAnswer(*text, arg);
    if (!trace) return std::move(trace).error();
    return FromTrace(std::move(*trace), "prometheus answer");
  }
  auto file = trace::FileSource::Open(arg);
  if (!file) return std::move(file).error();
  OpenedTrace out;
  out.source = std::move(*file);
  return out;
}

}  // namespace headroom::cli
