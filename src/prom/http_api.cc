#include "prom/http_api.h"

#include <fmt/format.h>
#include <httplib.h>

#include <charconv>
#include <cmath>

#include "common/sigpipe.h"
#include "common/watchdog.h"

namespace headroom::prom {
namespace {

std::string SecondsText(int64_t ms) {
  const int64_t whole = ms / 1000;
  const int64_t frac = ms % 1000;
  return frac == 0 ? fmt::format("{}", whole) : fmt::format("{}.{:03}", whole, frac);
}

class HttpApi final : public PrometheusApi {
 public:
  HttpApi(Endpoint endpoint, HttpOptions options)
      : endpoint_(std::move(endpoint)),
        options_(std::move(options)),
        client_(endpoint_.host, endpoint_.port) {
    const auto whole = static_cast<time_t>(options_.timeout_s);
    const auto usec = static_cast<time_t>((options_.timeout_s - static_cast<double>(whole)) * 1e6);
    client_.set_connection_timeout(whole, usec);
    client_.set_read_timeout(whole, usec);
    client_.set_write_timeout(whole, usec);
    client_.set_keep_alive(true);
    if (!options_.bearer_token.empty()) client_.set_bearer_token_auth(options_.bearer_token);
  }

  std::string Name() const override {
    return fmt::format("{}{}:{}{}", kScheme, endpoint_.host, endpoint_.port, endpoint_.path_prefix);
  }

  Result<std::string> QueryRange(const RangeQuery& q) override {
    ScopedSigpipeBlock no_sigpipe;  // httplib writes without MSG_NOSIGNAL
    const httplib::Params params = {{"query", q.query},
                                    {"start", SecondsText(q.start_ms)},
                                    {"end", SecondsText(q.end_ms)},
                                    {"step", SecondsText(q.step_ms)}};
    std::string body;
    bool too_large = false;
    const std::string path = endpoint_.path_prefix + "/api/v1/query_range";
    httplib::Result res(nullptr, httplib::Error::Unknown);
    bool expired = false;
    {
      // httplib's timeouts bound each read; a server trickling a byte at a time would hold the
      // query for ever. The deadline is the whole query's: past it the socket is shut down.
      const Watchdog deadline(options_.timeout_s, [this] { client_.stop(); });
      res = client_.Get(path, params, httplib::Headers{}, [&](const char* data, size_t n) {
        if (body.size() + n > options_.max_body_bytes) {
          too_large = true;
          return false;
        }
        body.append(data, n);
        return true;
      });
      expired = deadline.expired();
    }
    if (expired) {
      return Error::Io(fmt::format(
          "{}: no whole answer within {} s (--prometheus-timeout-s bounds each query, connect to "
          "last byte)",
          Name(), options_.timeout_s));
    }
    if (too_large) {
      return Error::Input(fmt::format(
          "{}: an answer over {} MiB: a shorter range, a coarser --step or a narrower --query",
          Name(), options_.max_body_bytes >> 20));
    }
    if (!res) {
      return Error::Io(
          fmt::format("{}: cannot query: {}", Name(), httplib::to_string(res.error())));
    }
    // 400 and 422 carry Prometheus's own error in JSON (a bad query, too many points).
    if (res->status != 200 && res->status != 400 && res->status != 422 && res->status != 503) {
      return Error::Io(fmt::format("{}: HTTP {} from {}", Name(), res->status, path));
    }
    return body;
  }

 private:
  Endpoint endpoint_;
  HttpOptions options_;
  httplib::Client client_;
};

}  // namespace

bool IsPrometheusUrl(std::string_view text) { return text.starts_with(kScheme); }

Result<Endpoint> ParseEndpoint(std::string_view url) {
  const auto bad = [&](std::string_view why) {
    return Error::Usage(fmt::format("'{}': {} (prometheus://HOST:PORT[/PREFIX])", url, why));
  };
  if (!IsPrometheusUrl(url)) return bad("not a prometheus:// address");
  std::string_view rest = url.substr(kScheme.size());
  Endpoint e;
  const size_t slash = rest.find('/');
  if (slash != std::string_view::npos) {
    std::string_view prefix = rest.substr(slash);
    while (prefix.size() > 1 && prefix.back() == '/') prefix.remove_suffix(1);
    if (prefix != "/") e.path_prefix = std::string(prefix);
    rest = rest.substr(0, slash);
  }
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos) return bad("no port");
  e.host = std::string(rest.substr(0, colon));
  if (e.host.empty() || e.host.find_first_of(":@?#[] ") != std::string::npos) {
    return bad("a host name or an IPv4 address");
  }
  const std::string_view port = rest.substr(colon + 1);
  int p = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (ec != std::errc() || end != port.data() + port.size() || p < 1 || p > 65535) {
    return bad("the port is a number in [1, 65535]");
  }
  e.port = p;
  if (e.path_prefix.find_first_of("?# ") != std::string::npos) return bad("a path prefix only");
  return e;
}

std::unique_ptr<PrometheusApi> MakeHttpApi(const Endpoint& endpoint, const HttpOptions& options) {
  return std::make_unique<HttpApi>(endpoint, options);
}

}  // namespace headroom::prom
