// src/net without sockets: the framing rules on bytes through Beast's parser (as the server
// feeds it), the router's checks in their order, the access policy, strict queries and --listen
// addresses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>

#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "net/beast_request.h"
#include "net/json_body.h"
#include "net/listen.h"
#include "net/policy.h"
#include "net/query.h"
#include "net/router.h"
#include "net/server.h"

namespace headroom::net {
namespace {

using ::testing::HasSubstr;
namespace http = boost::beast::http;

// What the server does with one request's bytes, up to the handler: "ok", or "400: why" where
// Beast's parser or the framing rules refuse it.
std::string Frame(const std::string& bytes) {
  const ServerLimits limits;
  http::request_parser<http::string_body> parser;
  parser.header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
  parser.body_limit(limits.max_body_bytes);
  boost::beast::error_code ec;
  boost::asio::const_buffer rest(bytes.data(), bytes.size());
  while (rest.size() > 0 && !parser.is_done()) {
    const size_t used = parser.put(rest, ec);
    rest += used;
    if (ec == http::error::need_more) break;
    if (ec) return "400: " + ec.message();
    if (parser.is_header_done()) {
      if (auto why = FramingError(parser.get())) return "400: " + *why;
    }
    if (used == 0) break;
  }
  return parser.is_done() ? "ok" : "incomplete";
}

TEST(NetFraming, AmbiguousRequestsAre400) {
  const std::string get = "GET /v1/status HTTP/1.1\r\n";
  const std::string post = "POST /v1/site-budget HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  struct Case {
    std::string bytes;
    std::string want;  // a part of Frame's answer
  };
  const Case cases[] = {
      // Well framed.
      {get + "Host: 127.0.0.1\r\n\r\n", "ok"},
      {post + "Content-Length: 2\r\n\r\n{}", "ok"},
      {post + "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", "ok"},
      {post + "Transfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", "ok"},
      {get + "Host: 127.0.0.1\r\nX-Tab: a\tb\r\n\r\n", "ok"},
      // Content-Length repeated: the same value, or another.
      {post + "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}", "400: Content-Length: repeated"},
      {post + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}}", "400"},
      {post + "Content-Length: 2, 2\r\n\r\n{}", "400: Content-Length: expected decimal digits"},
      {post + "Content-Length: +2\r\n\r\n{}", "400"},
      // Host repeated, even the same.
      {get + "Host: 127.0.0.1\r\nHost: 127.0.0.1\r\n\r\n", "400: Host: repeated"},
      {get + "Host: 127.0.0.1\r\nHost: evil.test\r\n\r\n", "400: Host: repeated"},
      // Transfer-Encoding with Content-Length, in either order; repeated; not ending in chunked.
      {post + "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}", "400"},
      {post + "Transfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\n{}\r\n0\r\n\r\n", "400"},
      {post + "Transfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}",
       "400: Transfer-Encoding with Content-Length"},
      {post + "Transfer-Encoding: gzip\r\n\r\n{}", "400: Transfer-Encoding: only chunked"},
      {post + "Transfer-Encoding: chunked, gzip\r\n\r\n{}", "400: Transfer-Encoding: only"},
      {post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "400"},
      // Control bytes in a field.
      {get + "Host: 127.0.0.1\r\nX-Nul: a" + std::string(1, '\0') + "b\r\n\r\n", "400"},
      {get + "Host: 127.0.0.1\r\nX-Bell: a\x07"
             "b\r\n\r\n",
       "400"},
      {get + "Host: 127.0.0.1\r\nX-Del: a\x7f\r\n\r\n", "400"},
      {get + "Host: 127.0.0.1\r\nX-Lf: a\nb: c\r\n\r\n", "400"},
      {"GET /" + std::string(1, '\0') + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "400"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(Frame(c.bytes), HasSubstr(c.want)) << testing::PrintToString(c.bytes);
  }
}

TEST(NetFraming, TheRequestTheHandlerSees) {
  http::request_parser<http::string_body> parser;
  parser.eager(true);
  const std::string bytes =
      "POST /v1/report?x=1 HTTP/1.1\r\nHost: node-7:10470\r\nAuthorization: Bearer t\r\n"
      "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(bytes), ec);
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_TRUE(parser.is_done());
  const Request r = ToRequest(parser.get());
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.target, "/v1/report?x=1");
  EXPECT_EQ(r.host, "node-7:10470");
  EXPECT_EQ(r.authorization, "Bearer t");
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(r.body, "{}");
}

// A router with one route of each access, calls recorded.
struct Routed {
  explicit Routed(AccessPolicy policy) : router(std::move(policy), "daemon") {
    router.Add("/", Router::Access::kPage, [this](const Request&, std::string_view) {
      calls.push_back("page");
      return JsonResponse(200, "{}");
    });
    router.Add("/v1/read", Router::Access::kRead, [this](const Request&, std::string_view q) {
      calls.push_back("read " + std::string(q));
      return JsonResponse(200, "{}");
    });
    router.Add("/v1/write", Router::Access::kWrite, [this](const Request& r, std::string_view) {
      calls.push_back("write " + std::string(r.body));
      return JsonResponse(202, "{}");
    });
  }
  Response Call(std::string_view method, std::string_view target,
                std::optional<std::string_view> host = "127.0.0.1:9000",
                std::optional<std::string_view> auth = std::nullopt,
                std::optional<std::string_view> type = std::nullopt, std::string_view body = "") {
    Request r;
    r.method = method;
    r.target = target;
    r.host = host;
    r.authorization = auth;
    r.content_type = type;
    r.body = body;
    return router.Handle(r);
  }
  Router router;
  std::vector<std::string> calls;
};

TEST(NetRouter, ChecksInOrderThenTheRoute) {
  AccessPolicy policy;
  policy.token = "s3cret";
  policy.allowed_hosts = {"node-7"};
  Routed r(policy);
  // Host first: even an unknown path or a bad method.
  EXPECT_EQ(r.Call("DELETE", "/nowhere", "evil.example").status, 403);
  const Response rebound = r.Call("GET", "/", "node-7.evil.example:80");
  EXPECT_EQ(rebound.status, 403);
  EXPECT_THAT(rebound.body, HasSubstr("not a name of this daemon (DNS rebinding?)"));
  EXPECT_EQ(r.Call("GET", "http://127.0.0.1/v1/read").status, 400);
  const Response missing = r.Call("GET", "/v2/<script>");
  EXPECT_EQ(missing.status, 404);
  EXPECT_THAT(missing.body, HasSubstr("no such path; this daemon serves /, /v1/read, /v1/write"));
  EXPECT_EQ(missing.body.find("<script>"), std::string::npos);  // nothing echoed
  Response wrong = r.Call("POST", "/v1/read");
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(wrong.headers,
            (std::vector<std::pair<std::string, std::string>>{{"Allow", "GET, HEAD"}}));
  wrong = r.Call("GET", "/v1/write");
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(wrong.headers, (std::vector<std::pair<std::string, std::string>>{{"Allow", "POST"}}));
  // Writes: the token, then the content type.
  const Response unauthorized =
      r.Call("POST", "/v1/write", "127.0.0.1", std::nullopt, "application/json", "{}");
  EXPECT_EQ(unauthorized.status, 401);
  EXPECT_EQ(unauthorized.headers,
            (std::vector<std::pair<std::string, std::string>>{{"WWW-Authenticate", "Bearer"}}));
  EXPECT_EQ(r.Call("POST", "/v1/write", "127.0.0.1", "Bearer s3cret", "text/plain", "{}").status,
            415);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.Call("POST", "/v1/write", "NODE-7", "bearer s3cret", "application/json; charset=x",
                   "{\"w\": 1}")
                .status,
            202);
  // Reads: open without token_on_reads; HEAD wherever GET; the query handed on.
  EXPECT_EQ(r.Call("HEAD", "/v1/read?a=1").status, 200);
  EXPECT_EQ(r.Call("GET", "/", std::nullopt).status, 200);  // HTTP/1.0: no Host
  EXPECT_EQ(r.calls, (std::vector<std::string>{"write {\"w\": 1}", "read a=1", "page"}));
}

TEST(NetRouter, TokenOnReadsLeavesOnlyThePagesOpen) {
  AccessPolicy policy;
  policy.token = "t";
  policy.token_on_reads = true;
  Routed r(policy);
  EXPECT_EQ(r.Call("GET", "/v1/read").status, 401);
  EXPECT_EQ(r.Call("GET", "/v1/read", "127.0.0.1", "Bearer t").status, 200);
  EXPECT_EQ(r.Call("GET", "/").status, 200);
}

// Issue 53, item 10: after the host, nothing or ":" and a port (1 to 5 digits, at most 65535).
// Before: whatever followed the first name's colon was dropped unread ("localhost:evil" passed).
TEST(NetPolicy, AHostsPortIsDigitsAndNothingAfterIt) {
  AccessPolicy policy;
  policy.allowed_hosts = {"coord.example"};
  for (const char* h :
       {"localhost:10470", "127.0.0.1:1", "coord.example:65535", "[::1]:0", "10.0.0.1:00080"}) {
    EXPECT_TRUE(HostAllowed(policy, std::string_view(h))) << h;
  }
  for (const char* h :
       {"localhost:evil", "127.0.0.1:", "127.0.0.1:80:80", "coord.example:10470:evil.example",
        "localhost:65536", "localhost:123456", "127.0.0.1:+80", "127.0.0.1:-1", "[::1]:1:2",
        "[::1]:", "[::1]:70000", "localhost: 80"}) {
    EXPECT_FALSE(HostAllowed(policy, std::string_view(h))) << h;
  }
}

TEST(NetPolicy, HostsTokensAndContentTypes) {
  AccessPolicy policy;
  policy.token = "s3cret";
  policy.allowed_hosts = {"coord.example"};
  for (const char* h :
       {"127.0.0.1", "127.0.0.1:10471", "localhost", "LOCALHOST:1", "[::1]:10471", "[fe80::1]",
        "10.1.2.3:80", "coord.example", "Coord.Example:10471", " 127.0.0.1 "}) {
    EXPECT_TRUE(HostAllowed(policy, std::string_view(h))) << h;
  }
  // Brackets hold an IPv6 literal, parsed (issue 36, item 9: "[anything]" passed).
  for (const char* h : {"evil.example", "coord.example.evil", "[::1", "", ":10471",
                        "localhost.evil.com", "127.0.0.1.nip.io", "[evil.example]",
                        "[evil.example]:10471", "[]", "[::1]x", "[1.2.3.4]"}) {
    EXPECT_FALSE(HostAllowed(policy, std::string_view(h))) << h;
  }
  EXPECT_TRUE(HostAllowed(policy, std::nullopt));
  for (const char* a : {"Bearer s3cret", "bearer s3cret", "BEARER  s3cret ", " Bearer s3cret\t"}) {
    EXPECT_TRUE(Authorized(policy, std::string_view(a))) << a;
  }
  for (const char* a : {"Bearer s3cre", "Bearer s3cret2", "Basic s3cret", "Bearers3cret", ""}) {
    EXPECT_FALSE(Authorized(policy, std::string_view(a))) << a;
  }
  EXPECT_FALSE(Authorized(policy, std::nullopt));
  EXPECT_TRUE(Authorized(AccessPolicy{}, std::nullopt));  // no token: nothing to carry
  for (const char* t :
       {"application/json", "Application/JSON; charset=utf-8", " application/json"}) {
    EXPECT_TRUE(IsJsonContentType(std::string_view(t))) << t;
  }
  for (const char* t : {"text/plain", "application/jsonx", "application/x-www-form-urlencoded",
                        "multipart/form-data", ""}) {
    EXPECT_FALSE(IsJsonContentType(std::string_view(t))) << t;
  }
  EXPECT_FALSE(IsJsonContentType(std::nullopt));
}

// Issue 36, item 9: a key given twice (the parser kept the last), a NUL byte (a trailing one
// was accepted), invalid UTF-8: one line naming the field or byte, for both daemons' bodies.
TEST(NetJsonBody, NulBytesKeysGivenTwiceAndInvalidUtf8AreRefused) {
  EXPECT_TRUE(CheckJsonBody(R"({"site_budget_w": 3000})").ok());
  EXPECT_TRUE(CheckJsonBody(R"({"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 1}, {"x": 2}]})").ok());
  EXPECT_TRUE(CheckJsonBody("not json").ok());  // the caller's parser says why
  const auto message = [](std::string_view body) {
    Status st = CheckJsonBody(body);
    return st.ok() ? std::string("ok") : st.error().message();
  };
  EXPECT_EQ(message(R"({"site_budget_w": 3000, "site_budget_w": 9000})"),
            "field 'site_budget_w': given twice");
  EXPECT_EQ(message(R"({"a": {"x": 1, "x": 2}})"), "field 'x': given twice");
  EXPECT_EQ(message(std::string_view("{\"budget_per_gpu_w\": 250}\0", 26)),
            "body: a NUL byte at byte 25");
  EXPECT_EQ(message("{\"job\": \"a\xff\"}"), "field 'job': invalid UTF-8 at byte 10");
  EXPECT_EQ(message("\xc3"), "body: invalid UTF-8 at byte 0");
}

TEST(NetPolicy, LoopbackHosts) {
  for (const char* h : {"127.0.0.1", "127.1.2.3", "localhost", "LocalHost", "::1", "[::1]"}) {
    EXPECT_TRUE(IsLoopbackHost(h)) << h;
  }
  for (const char* h : {"0.0.0.0", "10.0.0.1", "128.0.0.1", "127.0.0", "127.0.0.256",
                        "::", "localhost.evil.com", "127.0.0.1.nip.io", ""}) {
    EXPECT_FALSE(IsLoopbackHost(h)) << h;
  }
}

// A history route's ?after=T (the agent's /v1/history and the coordinator's).
TEST(NetQuery, AfterIsTheOnlyParameterOfAHistory) {
  EXPECT_EQ(*ParseAfterQuery("", -1.0, "t"), -1.0);
  EXPECT_EQ(*ParseAfterQuery("after=1796521800.5", -1.0, "t"), 1796521800.5);
  const auto bad = ParseAfterQuery("after=soon", -1.0, "a Unix time in seconds");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message(), "after: expected a Unix time in seconds");
  EXPECT_FALSE(ParseAfterQuery("before=1", -1.0, "t"));
  EXPECT_FALSE(ParseAfterQuery("after=1&after=2", -1.0, "t"));
  EXPECT_FALSE(ParseAfterQuery("after=nan", -1.0, "t"));
}

TEST(NetQuery, StrictParametersAndNumbers) {
  auto q = ParseQuery("after=3&timeout_s=2.5", {"after", "timeout_s"});
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->Get("after"), "3");
  EXPECT_EQ(q->Get("timeout_s"), "2.5");
  EXPECT_FALSE(q->Get("other").has_value());
  EXPECT_TRUE(ParseQuery("", {}).ok());
  for (const char* bad : {"x=1", "after", "after=1&after=2", "after=1&", "&after=1"}) {
    EXPECT_FALSE(ParseQuery(bad, {"after"}).ok()) << bad;
  }
  EXPECT_EQ(ParseQueryUint("0"), 0u);
  EXPECT_EQ(ParseQueryUint("18446744073709551615"), 18446744073709551615ull);
  for (const char* bad :
       {"", "-1", "+1", "1e3", "0x10", " 1", "1 ", "18446744073709551616", "%31", "1.0"}) {
    EXPECT_FALSE(ParseQueryUint(bad).has_value()) << bad;
  }
  EXPECT_EQ(ParseQueryReal("2.5"), 2.5);
  EXPECT_EQ(ParseQueryReal("+.5"), 0.5);
  EXPECT_EQ(ParseQueryReal("1e-3"), 0.001);
  EXPECT_EQ(ParseQueryReal("-0"), 0.0);
  for (const char* bad : {"", "nan", "inf", "-inf", "infinity", "0x10", "1e", "1e+", ".", "+",
                          "1.5s", "1e999", "--1", "1,5"}) {
    EXPECT_FALSE(ParseQueryReal(bad).has_value()) << bad;
  }
}

TEST(NetListen, HostPortAndIpv6) {
  auto ok = ParseListen("127.0.0.1:10470");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->host, "127.0.0.1");
  EXPECT_EQ(ok->port, 10470);
  EXPECT_EQ(ok->WithPort(9401), "127.0.0.1:9401");
  auto v6 = ParseListen("[::1]:0");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->WithPort(9500), "[::1]:9500");
  EXPECT_EQ(ParseListen("node-7:65535")->port, 65535);
  for (const char* bad : {"127.0.0.1", "127.0.0.1:99999", "127.0.0.1:94x", ":10470", "::1:10470",
                          "[::1:10470", "[]:10470", "127.0.0.1:", "127.0.0.1:-1"}) {
    const auto r = ParseListen(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().kind(), ErrorKind::kUsage);
    EXPECT_THAT(r.error().message(), HasSubstr(bad));
  }
}

TEST(NetHttp, ErrorBodiesAreJsonWhateverTheyQuote) {
  const Response r = ErrorResponse(400, "bad \"byte\" \xff\n");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_TRUE(nlohmann::json::accept(r.body)) << r.body;
  const Response busy = Unavailable("busy");
  EXPECT_EQ(busy.status, 503);
  EXPECT_EQ(busy.headers, (std::vector<std::pair<std::string, std::string>>{{"Retry-After", "1"}}));
  nlohmann::json j = ConnectionCounters{3, 1, 10, 2, 4, 5, 20, 6};
  EXPECT_EQ(
      j.dump(),
      R"({"accepted":10,"busy":6,"evicted":4,"idle":1,"open":3,"refused":2,"requests":20,"timed_out":5})");
}

}  // namespace
}  // namespace headroom::net
