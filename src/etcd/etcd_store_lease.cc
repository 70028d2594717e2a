// EtcdStore's leases (etcd_store.h): granted and revoked by the gateway, renewed on the
// store's keep-alive stream (etcd_lease_stream.h) or by the gateway. EtcdStore's, in a file of
// their own.
#include <fmt/format.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "etcd/etcd_lease_stream.h"
#include "etcd/etcd_store.h"
#include "etcd/etcd_wire.h"

namespace headroom::etcd {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Renewals by the gateway for this long after no keep-alive stream could be opened.
constexpr int64_t kStreamRetryS = 60;

}  // namespace

Result<EtcdKeepAlive> ParseEtcdKeepAlive(const std::string& text) {
  if (text == "grpc") return EtcdKeepAlive::kGrpcStream;
  if (text == "http") return EtcdKeepAlive::kHttpPost;
  return Error::Usage(fmt::format(
      "etcd keep-alive '{}': 'grpc' (one stream per store) or 'http' (one POST per renewal)",
      text));
}

const char* EtcdKeepAliveName(EtcdKeepAlive keepalive) {
  return keepalive == EtcdKeepAlive::kGrpcStream ? "grpc" : "http";
}

Result<coord::LeaseId> EtcdStore::LeaseGrant(int64_t ttl_s) {
  json body = json::object();
  body["TTL"] = std::to_string(ttl_s);
  // Granting again after a lost answer leaves at worst an unused lease, which expires.
  Result<Answer> a = Post("/v3/lease/grant", body.dump(), Resend::kHarmless);
  if (!a.ok()) return std::move(a).error();
  const json j = json::parse(a->body, nullptr, false);
  AnswerReader r(fmt::format("etcd at {}: /v3/lease/grant", a->url));
  const coord::LeaseId id = r.Int(j, "ID");
  const std::string error = r.String(j, "error");
  if (!r.ok()) return r.error();
  if (!error.empty()) return Error::Io(fmt::format("etcd at {}: lease grant: {}", a->url, error));
  if (id == 0) {
    r.Fail("no ID");
    return r.error();
  }
  return id;
}

Result<int64_t> EtcdStore::LeaseKeepAlive(coord::LeaseId lease) {
  const int64_t now_ns = Clock::now().time_since_epoch().count();
  if (!lease_stream_ || now_ns < http_until_ns_.load()) return LeaseKeepAliveHttp(lease);
  Result<int64_t> kept = lease_stream_->KeepAlive(lease);
  if (!kept.ok() && kept.error().kind() == ErrorKind::kUnavailable) {
    // No stream could be opened on any member: by the gateway. Where the gateway answers (the
    // stream refused on its own: a certificate gRPC will not take), it renews for a minute
    // before the stream is tried again; etcd down, the next renewal tries the stream first.
    Result<int64_t> by_gateway = LeaseKeepAliveHttp(lease);
    if (by_gateway.ok() || by_gateway.error().kind() == ErrorKind::kNotFound) {
      http_until_ns_.store(
          now_ns +
          std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(kStreamRetryS)).count());
      return by_gateway;
    }
    return kept;
  }
  // etcd refused the stream's token (expired): authenticate again, then a stream with the new
  // one (as Post does for a request).
  if (!kept.ok() && !credentials_.user.empty() &&
      kept.error().kind() == ErrorKind::kUnauthenticated) {
    {
      MutexLock lock(mu_);
      if (Status s = AuthenticateLocked(); !s.ok()) return std::move(s).error();
    }
    lease_stream_->Reset();
    kept = lease_stream_->KeepAlive(lease);
  }
  return kept;
}

Result<int64_t> EtcdStore::LeaseKeepAliveHttp(coord::LeaseId lease) {
  json body = json::object();
  body["ID"] = std::to_string(lease);
  // A stream in gRPC; through the gateway one request gets one answer and the stream ends.
  Result<Answer> a = Post("/v3/lease/keepalive", body.dump(), Resend::kHarmless);
  if (!a.ok()) return std::move(a).error();
  const std::string where = fmt::format("etcd at {}: /v3/lease/keepalive", a->url);
  std::string_view text = a->body;
  text.remove_prefix(std::min(text.size(), text.find_first_not_of(" \r\n\t")));
  const size_t line_end = text.find('\n');
  const json j = json::parse(text.substr(0, line_end), nullptr, false);
  if (std::optional<EtcdError> e = ErrorOf(j)) {
    return Error(e->kind, fmt::format("{}: {}", where, e->message));
  }
  AnswerReader r(where);
  const json& result = r.Object(j, "result", true);
  const int64_t ttl_s = r.Int(result, "TTL");
  if (!r.ok()) return r.error();
  // etcd answers a lease it does not have with TTL 0 (left out), not with an error.
  if (ttl_s <= 0) {
    return Error::NotFound(fmt::format("{}: lease {}: {}", where, lease, coord::kLeaseGone));
  }
  return ttl_s;
}

Status EtcdStore::LeaseRevoke(coord::LeaseId lease) {
  json body = json::object();
  body["ID"] = std::to_string(lease);
  // etcd 3.4 answers both /v3/lease/revoke and /v3/kv/lease/revoke; 3.5 only the first.
  Result<Answer> a = Post("/v3/lease/revoke", body.dump(), Resend::kNever);
  if (!a.ok()) return std::move(a).error();
  AnswerReader r(fmt::format("etcd at {}: /v3/lease/revoke", a->url));
  r.Revision(json::parse(a->body, nullptr, false));
  if (!r.ok()) return r.error();
  return OkStatus();
}

}  // namespace headroom::etcd
