// The Store on etcd (3.4 or later), through its v3 JSON gateway over plain HTTP: the one file
// that talks to etcd. Keys and values travel base64-encoded, 64-bit numbers as JSON strings.
//
// Endpoints: one or more members of one cluster. Requests go to the member that last answered;
// when it cannot be reached, to the next ones in turn. A request that could not have reached a
// member (connection refused or timed out, a TLS handshake that failed, etcd's "no leader") is
// sent again to the next one.
// One that may have been received and not answered (read timeout, connection lost, etcd's
// "request timed out") is resent only when resending is harmless (reads, keep-alives, lease
// grants); for Put, Delete, Txn and LeaseRevoke it fails with ErrorKind::kOutcomeUnknown.
//
// Lease renewals (LeaseKeepAlive) go, by default, on one long-lived gRPC stream to etcd
// (etcd_lease_stream.h; EtcdKeepAlive below), not through the gateway.
//
// Thread-safe: one mutex serialises the requests on the shared connections; Watch and Follow
// open their own connection for their stream, so a long watch does not hold up the other calls.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "common/watchdog.h"
#include "coord/store.h"
#include "etcd/etcd_tls.h"

namespace httplib {
class Client;
}

namespace headroom::etcd {

class LeaseStream;

// How EtcdStore renews leases. kGrpcStream: every renewal of the store on one long-lived
// bidirectional gRPC stream to etcd (etcd's Lease.LeaseKeepAlive, etcd_lease_stream.h), one
// message each way per renewal. kHttpPost: one POST to the gateway's /v3/lease/keepalive per
// renewal, each of them a gRPC call that etcd starts and ends (the gateway cannot keep one
// open: etcd_lease_stream.h). Measured (bench/etcd_benchmark.cc: 1,000 renewals, one etcd on
// loopback, a 2-core VM), the stream costs etcd 2.6-3.2x less CPU per renewal (200 against 520-570
// ms per 1,000 from one thread) and answers 2-2.4x sooner; from 8 threads on one store ~5x less
// CPU and ~4x sooner (the POSTs wait their turn on the store's connection): it is the default.
enum class EtcdKeepAlive { kGrpcStream, kHttpPost };
inline constexpr EtcdKeepAlive kDefaultEtcdKeepAlive = EtcdKeepAlive::kGrpcStream;
// "grpc" or "http" (what a --etcd-keepalive flag takes); Error::Usage for anything else.
Result<EtcdKeepAlive> ParseEtcdKeepAlive(const std::string& text);
const char* EtcdKeepAliveName(EtcdKeepAlive keepalive);

// etcd's user and password (its v3 auth). Every request carries the token etcd gives for them;
// an expired token is renewed once, then the request is sent again.
struct EtcdCredentials {
  std::string user;  // empty: no authentication
  std::string password;
};

// "USER:PASSWORD_FILE" (a user and the file holding the password on its first line): what
// --etcd-user takes. An input error naming the file when it cannot be read.
Result<EtcdCredentials> ReadEtcdCredentials(const std::string& user,
                                            const std::string& password_file);

// The endpoints and TLS files as Open checks them, without connecting (a command's options are
// checked before anything starts): Error::Usage or Error::Input as Open's, the files' contents
// too (CheckTlsFiles: PEM, the key the certificate's).
Status CheckEtcdAccess(const std::string& endpoints, const EtcdTls& tls);

class EtcdStore final : public coord::Store {
 public:
  // `endpoints`: comma-separated members, "http://127.0.0.1:2379,http://127.0.0.1:22379",
  // "127.0.0.1:2379" or "etcd://host:port,host:port"; with TLS "https://host:port,..." or
  // "etcds://host:port,..." (one scheme for all). Checks that one of them answers (an Error::Io
  // naming them when none does). `timeout_s` bounds connecting and each wait for an answer
  // (Watch waits up to its wait_s instead); not positive: Error::Usage. `tls` files on plain
  // http endpoints, or a certificate without its key: Error::Usage; a file that cannot be
  // read, is not PEM, or a key not the certificate's: Error::Input naming it. A TLS failure
  // names its cause (etcd_tls.h: NameTlsFailure), as does the wrong scheme. With
  // `credentials`, Open authenticates too (an Error::Io saying so when etcd refuses them).
  // `keepalive`: how LeaseKeepAlive renews (the stream is opened at the first renewal).
  static Result<std::unique_ptr<EtcdStore>> Open(const std::string& endpoints,
                                                 double timeout_s = 2.0,
                                                 const EtcdCredentials& credentials = {},
                                                 const EtcdTls& tls = {},
                                                 EtcdKeepAlive keepalive = kDefaultEtcdKeepAlive);
  ~EtcdStore() override;
  EtcdStore(const EtcdStore&) = delete;
  EtcdStore& operator=(const EtcdStore&) = delete;

  Result<coord::RangeResult> Get(const std::string& key, bool prefix = false) override;
  Result<int64_t> Put(const std::string& key, const std::string& value,
                      coord::LeaseId lease = 0) override;
  // With nothing to delete, etcd writes nothing: returns the store's current revision.
  Result<int64_t> Delete(const std::string& key, bool prefix = false) override;
  Result<coord::TxnResult> Txn(const coord::TxnRequest& request) override;
  // Up to kTxnLanes at once: this store's connections and those of kTxnLanes - 1 more stores
  // like it (made on first use, kept), each on a thread of its own for the call.
  std::vector<Result<coord::TxnResult>> TxnEach(
      const std::vector<coord::TxnRequest>& requests) override EXCLUDES(mu_, lanes_mu_);
  static constexpr size_t kTxnLanes = 4;
  Result<coord::LeaseId> LeaseGrant(int64_t ttl_s) override;
  // One renewal, as `keepalive` says: on the store's stream (several threads' at once) or as one
  // POST. TTL <= 0 in etcd's answer: Error::NotFound (the lease is gone). A stream that broke or
  // gave no answer within the timeout: Error::Io, and the next renewal opens another stream,
  // starting with the next member; no member to open one on: Error::Unavailable.
  Result<int64_t> LeaseKeepAlive(coord::LeaseId lease) override;
  Status LeaseRevoke(coord::LeaseId lease) override;
  // Waits at least 0.25 s when nothing happens (the stream's only deadline is a read timeout).
  // With events, `revision` is the last event's: etcd may send a long history in parts, so
  // the events are complete up to there, not up to the store's revision. A compacted history
  // gives compacted=true and the revision the watch was created at.
  Result<coord::WatchResult> Watch(const std::string& key, bool prefix, int64_t after_revision,
                                   double wait_s) override;
  // One stream on its own connection, open while `on_change` wants more and something comes
  // within `quiet_s` (at least 0.25 s).
  Result<int64_t> Follow(const std::string& key, bool prefix, int64_t after_revision,
                         double quiet_s,
                         const std::function<bool(const coord::WatchResult&)>& on_change) override;
  void CancelFollows() override EXCLUDES(follow_mu_);
  bool WatchWaits() const override { return true; }
  Status Compact(int64_t revision) override;
  std::string Describe() const override;

 private:
  // Whether a request may be sent again after it may have reached a member.
  enum class Resend { kHarmless, kNever };

  EtcdStore(std::vector<std::string> urls, double timeout_s, EtcdCredentials credentials,
            EtcdTls tls, EtcdKeepAlive keepalive);
  // LeaseKeepAlive through the gateway, one POST.
  Result<int64_t> LeaseKeepAliveHttp(coord::LeaseId lease);
  struct Answer {
    std::string url;  // the member that answered
    std::string body;
  };
  // POSTs `body` to `path`, trying the members in turn as the class comment says; the answer
  // when etcd answered 200, else an error naming the member(s) tried.
  Result<Answer> Post(const char* path, const std::string& body, Resend resend) EXCLUDES(mu_);
  Result<Answer> PostLocked(const char* path, const std::string& body, Resend resend) REQUIRES(mu_);
  // A token for credentials_ from any member (POST /v3/auth/authenticate).
  Status AuthenticateLocked() REQUIRES(mu_);
  // Watch's stream, and Follow's with `follow`.
  Result<coord::WatchResult> Stream(const std::string& key, bool prefix, int64_t after_revision,
                                    double wait_s,
                                    const std::function<bool(const coord::WatchResult&)>* follow)
      EXCLUDES(mu_, follow_mu_);

  // Constant after construction.
  const std::vector<std::string> urls_;  // "http://host:port" or "https://host:port"
  const double timeout_s_;
  const EtcdCredentials credentials_;
  const EtcdTls tls_;
  const EtcdKeepAlive keepalive_;
  // With kGrpcStream (thread-safe itself; it asks mu_ for token_ when it opens a stream).
  std::unique_ptr<LeaseStream> lease_stream_;
  // Until when (steady clock, ns) renewals go by the gateway after the stream could not be
  // opened at all (a certificate gRPC refuses where the gateway's client accepts it: its host
  // in the common name only): a renewal never fails for the stream's sake alone.
  std::atomic<int64_t> http_until_ns_{0};

  mutable Mutex mu_;
  std::vector<std::unique_ptr<httplib::Client>> clients_ GUARDED_BY(mu_);  // one per url
  size_t current_ GUARDED_BY(mu_) = 0;  // the member that last answered
  // Each request's whole deadline, kWholeRequestTimeouts x timeout_s_ (httplib's timeouts bound
  // each read: a member trickling bytes would hold the request, and mu_, for ever).
  RearmableWatchdog request_deadline_;
  std::string token_ GUARDED_BY(mu_);  // etcd's auth token, when credentials_ has a user

  Mutex lanes_mu_;
  std::vector<std::unique_ptr<EtcdStore>> lanes_ GUARDED_BY(lanes_mu_);  // TxnEach's others

  Mutex follow_mu_;
  std::set<httplib::Client*> following_ GUARDED_BY(follow_mu_);  // the Follows in progress
  bool follows_canceled_ GUARDED_BY(follow_mu_) = false;
};

}  // namespace headroom::etcd
