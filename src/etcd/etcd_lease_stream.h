// Lease renewals over etcd's native gRPC: one long-lived bidirectional stream (etcd's
// Lease.LeaseKeepAlive) carrying the renewals of every lease one EtcdStore renews. The one file
// that talks gRPC to etcd (etcd_lease.proto is the part of etcd's API it speaks; etcd_store.cc
// talks HTTP to etcd's JSON gateway and owns one of these).
//
// Why not the gateway's stream: etcd 3.4's gateway serves /v3/lease/keepalive over HTTP/1.1,
// where Go's net/http (etcd 3.4.23 is built with Go 1.19: no full duplex) reads and discards the
// rest of a request body, up to 256 KiB, before it writes the answer's header. A chunked POST held
// open with one keep-alive in it gets nothing back, not even the status line, until the body ends
// (then every answer at once): one request is one renewal. Padding the body with megabytes of
// blanks gets the header out and the stream going, but not reliably (1 MiB: 8 times in 10).
//
// The stream: opened on the first KeepAlive, on the first endpoint that connects, starting with
// the one after the endpoint of the last stream that broke; it stays open. Each KeepAlive sends
// one request (the lease's ID) on it and waits, up to `timeout_s`, for etcd's answer with that ID
// (etcd answers each request in order; several renewals of several threads are in flight at once,
// matched by ID).
//
// Failures: a stream that breaks (the member gone, etcd's error such as "no leader", a write that
// cannot be made or an answer that does not come within `timeout_s`: the stream is then cancelled)
// fails every renewal waiting on it with Error::Io naming the member and gRPC's status, and the
// next KeepAlive opens another. A renewal is harmless to repeat but is not repeated here: the
// callers renew again next period (coord::Lease). etcd refusing the token: Error::Unauthenticated
// (EtcdStore authenticates again and calls once more). TTL <= 0 in the answer: the lease is gone,
// Error::NotFound (coord::IsLeaseGone), as over HTTP.
//
// TLS: https:// endpoints get EtcdTls's CA (else gRPC's roots), certificate and key, read at
// each open (a rotated certificate is taken at the next stream); http:// ones no TLS. gRPC finds
// etcd's host in the certificate's subjectAltName only: one that names it in its common name
// alone, which the gateway's client accepts, is refused ("Peer name ... is not in peer
// certificate"). Auth: the token `token()` gives at each open travels in the stream's metadata
// ("token", as etcd's gRPC wants it; the gateway's HTTP requests carry it as Authorization).
//
// Thread-safe: any number of KeepAlive at once; Reset from any thread. One thread of its own per
// open stream reads etcd's answers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/thread_annotations.h"
#include "coord/store.h"
#include "etcd/etcd_tls.h"

namespace headroom::etcd {

class LeaseStream {
 public:
  // The auth token to send with a new stream ("" for none).
  using TokenSource = std::function<std::string()>;

  // `urls`: "http://host:port" or "https://host:port", one per member (etcd_wire.h's
  // ParseEndpoints). REQUIRES: urls not empty, timeout_s > 0, the TLS files checked
  // (CheckEtcdAccess). Connects to nothing until the first KeepAlive.
  LeaseStream(std::vector<std::string> urls, double timeout_s, EtcdTls tls, TokenSource token);
  // Cancels the stream and waits for its reader thread. REQUIRES: no KeepAlive in progress.
  ~LeaseStream();
  LeaseStream(const LeaseStream&) = delete;
  LeaseStream& operator=(const LeaseStream&) = delete;

  // Renews `lease` once: its new TTL, s. Opening a stream takes up to `timeout_s` per endpoint;
  // the answer up to `timeout_s` more.
  Result<int64_t> KeepAlive(coord::LeaseId lease) EXCLUDES(mu_);

  // Cancels the open stream (the renewals waiting on it fail); the next KeepAlive opens another,
  // with the token then given (after EtcdStore authenticated again).
  void Reset() EXCLUDES(mu_);

  // How many streams were opened so far (tests: one stream for many renewals).
  int64_t streams_opened() const EXCLUDES(mu_);

 private:
  struct Call;  // one open stream, its reader thread and the renewals waiting on it

  // The open stream, or a new one (one thread opens, the others wait for it and share what came).
  Result<std::shared_ptr<Call>> Current() EXCLUDES(mu_);
  // A stream on the first endpoint that connects, from urls_[first] on; Error::Unavailable
  // naming each endpoint's failure when none does.
  Result<std::shared_ptr<Call>> Open(size_t first) const;
  // A stream on urls_[index], connected within timeout_s_.
  Result<std::shared_ptr<Call>> OpenOn(size_t index) const;

  // Constant after construction.
  const std::vector<std::string> urls_;
  const double timeout_s_;
  const EtcdTls tls_;
  const TokenSource token_;

  mutable Mutex mu_;
  std::condition_variable_any opened_cv_;             // an open ended
  std::shared_ptr<Call> call_ GUARDED_BY(mu_);        // the open stream (or the last, broken)
  size_t next_ GUARDED_BY(mu_) = 0;                   // where the next open starts
  bool opening_ GUARDED_BY(mu_) = false;              // a thread is opening a stream, mu_ released
  std::optional<Error> open_failed_ GUARDED_BY(mu_);  // the last open's failure, for its waiters
  int64_t opens_ GUARDED_BY(mu_) = 0;                 // how many opens ended (either way)
  int64_t streams_opened_ GUARDED_BY(mu_) = 0;
};

}  // namespace headroom::etcd
