#include "etcd/etcd_lease_stream.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <deque>
#include <map>
#include <thread>
#include <tuple>
#include <utility>

#include "common/read_file.h"
#include "etcd/etcd_lease.grpc.pb.h"

namespace headroom::etcd {
namespace {

using Clock = std::chrono::steady_clock;
using KeepAliveStream = grpc::ClientReaderWriter<etcdserverpb::LeaseKeepAliveRequest,
                                                 etcdserverpb::LeaseKeepAliveResponse>;

// The method, as messages name it.
constexpr const char* kMethod = "gRPC Lease/LeaseKeepAlive";

Clock::time_point After(double s) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// `deadline` as gRPC takes it (its deadlines are on its own clocks, not on steady_clock).
gpr_timespec GrpcDeadline(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::max(Clock::duration::zero(), deadline - Clock::now()));
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_nanos(left.count(), GPR_TIMESPAN));
}

// gRPC's status codes in words, by number (grpc::StatusCode).
constexpr std::array<const char*, 17> kCodeNames = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

const char* CodeName(grpc::StatusCode code) {
  const auto i = static_cast<size_t>(code);
  return i < kCodeNames.size() ? kCodeNames[i] : "an unknown code";
}

std::string Where(const std::string& url) { return fmt::format("etcd at {}: {}", url, kMethod); }

// How a stream ended, as an error of ours: etcd refusing the token is kUnauthenticated (the
// store authenticates again); anything else kIo.
Error StreamError(const std::string& url, const grpc::Status& status) {
  if (status.ok()) return Error::Io(fmt::format("{}: etcd ended the stream", Where(url)));
  const std::string message =
      fmt::format("{}: {} ({})", Where(url), status.error_message(), CodeName(status.error_code()));
  if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    return Error::Unauthenticated(message);
  }
  return Error::Io(message);
}

// A renewal sent on a stream, waiting for its answer.
struct Renewal {
  std::optional<Result<int64_t>> answer;
};

}  // namespace

// One open stream. Its reader thread (Read) hands each answer to the oldest renewal of that
// lease waiting on it; when the stream ends it fails every renewal still waiting.
struct LeaseStream::Call {
  Call(std::string url_in, size_t index_in) : url(std::move(url_in)), index(index_in) {}
  // Cancels the stream and waits for the reader thread (it ends at once: the stream's Read
  // returns false when the call is cancelled).
  ~Call() {
    context.TryCancel();
    if (reader.joinable()) reader.join();
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  bool Broken() EXCLUDES(mu) {
    MutexLock lock(mu);
    return failure.has_value() || ended;
  }

  // The first failure breaks the stream: every renewal waiting on it gets it.
  void Fail(const Error& e) REQUIRES(mu) {
    if (failure) return;
    failure = e;
    for (auto& [lease, renewals] : waiting) {
      for (Renewal* r : renewals) r->answer = e;
    }
    waiting.clear();
    answered.notify_all();
  }

  // Breaks the stream with `e` and cancels it (the reader thread then ends).
  void Cancel(const Error& e) EXCLUDES(mu) {
    {
      MutexLock lock(mu);
      Fail(e);
    }
    context.TryCancel();
  }

  void Read() EXCLUDES(mu) {
    etcdserverpb::LeaseKeepAliveResponse response;
    while (stream->Read(&response)) {
      MutexLock lock(mu);
      auto it = waiting.find(response.id());
      if (it == waiting.end()) continue;  // its renewal gave up waiting
      Renewal* r = it->second.front();
      it->second.pop_front();
      if (it->second.empty()) waiting.erase(it);
      // etcd answers a lease it does not have with TTL 0, not with an error.
      if (response.ttl() > 0) {
        r->answer = response.ttl();
      } else {
        r->answer = Error::NotFound(
            fmt::format("{}: lease {}: {}", Where(url), response.id(), coord::kLeaseGone));
      }
      answered.notify_all();
    }
    {
      // No Write starts now, and Finish must not run beside one.
      MutexLock lock(mu);
      ended = true;
      Wait(write_free, mu, [this]() REQUIRES(mu) { return !writing; });
    }
    const grpc::Status status = stream->Finish();
    MutexLock lock(mu);
    Fail(StreamError(url, status));
  }

  // Writes one request, unless the stream is broken or ended; waits until `deadline` for a Write
  // in progress. False when that one did not end in time (etcd reads nothing).
  bool Write(coord::LeaseId lease, Clock::time_point deadline) EXCLUDES(mu) {
    {
      MutexLock lock(mu);
      if (!WaitUntil(write_free, mu, deadline, [this]() REQUIRES(mu) { return !writing; })) {
        return false;
      }
      if (failure || ended) return true;  // its reader fails the renewal
      writing = true;
    }
    etcdserverpb::LeaseKeepAliveRequest request;
    request.set_id(lease);
    stream->Write(request);  // false: the stream is gone, and Read says why
    MutexLock lock(mu);
    writing = false;
    write_free.notify_all();
    return true;
  }

  // Constant once the stream is open (the reader thread and context are thread-safe).
  const std::string url;
  const size_t index;  // url's place in the store's list
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<etcdserverpb::Lease::Stub> stub;
  grpc::ClientContext context;
  std::unique_ptr<KeepAliveStream> stream;  // destroyed before the context
  std::thread reader;

  Mutex mu;
  std::condition_variable_any answered;    // a renewal got its answer
  std::condition_variable_any write_free;  // writing went false
  bool writing GUARDED_BY(mu) = false;  // a Write in progress (one at a time, none beside Finish)
  bool ended GUARDED_BY(mu) = false;    // Read returned false
  std::optional<Error> failure GUARDED_BY(mu);
  // The renewals sent and not answered, oldest first per lease.
  std::map<coord::LeaseId, std::deque<Renewal*>> waiting GUARDED_BY(mu);
};

LeaseStream::LeaseStream(std::vector<std::string> urls, double timeout_s, EtcdTls tls,
                         TokenSource token)
    : urls_(std::move(urls)),
      timeout_s_(timeout_s),
      tls_(std::move(tls)),
      token_(std::move(token)) {}

LeaseStream::~LeaseStream() {
  std::shared_ptr<Call> call;
  {
    MutexLock lock(mu_);
    call = std::move(call_);
  }
  // ~Call cancels the stream and joins its reader.
}

int64_t LeaseStream::streams_opened() const {
  MutexLock lock(mu_);
  return streams_opened_;
}

void LeaseStream::Reset() {
  std::shared_ptr<Call> call;
  {
    MutexLock lock(mu_);
    call = std::move(call_);
    if (call) next_ = call->index;  // the member was fine: open there again
  }
  if (call) call->Cancel(Error::Io(fmt::format("{}: the stream was reset", Where(call->url))));
}

Result<std::shared_ptr<LeaseStream::Call>> LeaseStream::Current() {
  size_t first = 0;
  std::shared_ptr<Call> broken;
  {
    MutexLock lock(mu_);
    while (true) {
      if (call_ && !call_->Broken()) return call_;
      if (!opening_) break;
      // Another thread is opening one: its stream, or its failure, is this call's too.
      const int64_t opens = opens_;
      Wait(opened_cv_, mu_, [&]() REQUIRES(mu_) { return opens_ != opens; });
      if (call_ && !call_->Broken()) return call_;
      if (open_failed_) return *open_failed_;
    }
    opening_ = true;
    // A stream that broke: its member may be the trouble, so the next one first.
    first = call_ ? (call_->index + 1) % urls_.size() : next_;
    broken = std::move(call_);
  }
  broken.reset();  // ~Call: cancelled, its reader joined (unless a renewal still holds it)
  Result<std::shared_ptr<Call>> opened = Open(first);
  MutexLock lock(mu_);
  opening_ = false;
  ++opens_;
  if (opened.ok()) {
    call_ = *opened;
    next_ = call_->index;
    ++streams_opened_;
    open_failed_.reset();
  } else {
    open_failed_ = opened.error();
  }
  opened_cv_.notify_all();
  return opened;
}

Result<std::shared_ptr<LeaseStream::Call>> LeaseStream::Open(size_t first) const {
  const size_t n = urls_.size();
  std::string tried;  // "url: what went wrong; ..."
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (first + k) % n;
    Result<std::shared_ptr<Call>> call = OpenOn(i);
    if (call.ok()) return call;
    tried += fmt::format("{}{}: {}", tried.empty() ? "" : "; ", urls_[i], call.error().message());
  }
  // No stream on any member: nothing was sent.
  return Error::Unavailable(
      fmt::format("etcd at {}: {}: {}", fmt::join(urls_, ","), kMethod, tried));
}

Result<std::shared_ptr<LeaseStream::Call>> LeaseStream::OpenOn(size_t index) const {
  const std::string& url = urls_[index];
  const bool tls = url.rfind("https://", 0) == 0;
  const std::string target = url.substr(url.find("://") + 3);
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (tls) {
    grpc::SslCredentialsOptions ssl;
    for (auto [file, pem, flag] :
         {std::tuple{&tls_.cacert_file, &ssl.pem_root_certs, "--etcd-cacert"},
          std::tuple{&tls_.cert_file, &ssl.pem_cert_chain, "--etcd-cert"},
          std::tuple{&tls_.key_file, &ssl.pem_private_key, "--etcd-key"}}) {
      if (file->empty()) continue;
      Result<std::string> read = ReadRegularFileCapped(*file, kMaxTlsFileBytes, flag);
      if (!read.ok()) return std::move(read).error();
      *pem = std::move(*read);
    }
    credentials = grpc::SslCredentials(ssl);
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  grpc::ChannelArguments args;
  // A channel of its own for each stream, not gRPC's shared connection to the member: a new
  // stream after a failure connects at once, without the backoff an older failure left.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto call = std::make_shared<Call>(url, index);
  call->channel = grpc::CreateCustomChannel(target, credentials, args);

  // Connected (TCP, and TLS's handshake) within the timeout, or why not.
  const Clock::time_point deadline = After(timeout_s_);
  grpc_connectivity_state state = call->channel->GetState(/*try_to_connect=*/true);
  call->stub = etcdserverpb::Lease::NewStub(call->channel);
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN) {
      // gRPC keeps the connection's error for the calls on it: one that fails at once says it.
      grpc::ClientContext probe;
      probe.set_deadline(GrpcDeadline(deadline));
      std::unique_ptr<KeepAliveStream> s = call->stub->LeaseKeepAlive(&probe);
      s->WritesDone();
      const grpc::Status status = s->Finish();
      // (Words for the operator only; nothing branches on them.)
      const bool host_not_in_san =
          tls && status.error_message().find("is not in peer certificate") != std::string::npos;
      return Error::Io(fmt::format(
          "{} ({}){}", status.error_message(), CodeName(status.error_code()),
          host_not_in_san ? ": gRPC looks for etcd's host in its certificate's subjectAltName, "
                            "not in its common name (reissue it, or renew leases over HTTP)"
                          : ""));
    }
    if (!call->channel->WaitForStateChange(state, GrpcDeadline(deadline))) {
      return Error::Io(fmt::format("no connection within {} s", timeout_s_));
    }
    state = call->channel->GetState(/*try_to_connect=*/true);
  }
  if (const std::string token = token_ ? token_() : std::string(); !token.empty()) {
    call->context.AddMetadata("token", token);
  }
  call->stream = call->stub->LeaseKeepAlive(&call->context);
  call->reader = std::thread([c = call.get()] { c->Read(); });
  return call;
}

Result<int64_t> LeaseStream::KeepAlive(coord::LeaseId lease) {
  Result<std::shared_ptr<Call>> current = Current();
  if (!current.ok()) return std::move(current).error();
  Call& call = **current;
  const Clock::time_point deadline = After(timeout_s_);
  Renewal renewal;
  {
    MutexLock lock(call.mu);
    if (call.failure) return *call.failure;
    call.waiting[lease].push_back(&renewal);
  }
  // Sent, unless the stream broke meanwhile (its reader then fails this renewal) or a Write
  // before this one is stuck (etcd reads nothing: the stream is cancelled).
  if (!call.Write(lease, deadline)) {
    call.Cancel(Error::Io(
        fmt::format("{}: a renewal could not be sent within {} s", Where(call.url), timeout_s_)));
  }
  bool answered = false;
  {
    MutexLock lock(call.mu);
    answered = WaitUntil(call.answered, call.mu, deadline,
                         [&renewal] { return renewal.answer.has_value(); });
    if (answered) return std::move(*renewal.answer);
    auto it = call.waiting.find(lease);
    if (it != call.waiting.end()) {
      std::erase(it->second, &renewal);
      if (it->second.empty()) call.waiting.erase(it);
    }
  }
  // No answer in time: the stream is stuck (or etcd is); the next renewal opens another.
  const Error late = Error::Io(
      fmt::format("{}: no answer within {} s (lease {})", Where(call.url), timeout_s_, lease));
  call.Cancel(late);
  return late;
}

}  // namespace headroom::etcd
