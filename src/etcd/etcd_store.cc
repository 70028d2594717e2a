#include "etcd/etcd_store.h"

#include <fmt/format.h>
#include <httplib.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

#include "common/read_file.h"
#include "common/sigpipe.h"
#include "etcd/etcd_lease_stream.h"
#include "etcd/etcd_wire.h"

namespace headroom::etcd {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// A request's whole deadline, in timeouts: connecting, then the answer, each bounded by the
// timeout; a member trickling bytes is cut there.
constexpr double kWholeRequestTimeouts = 2.0;

// The least time a watch waits for etcd's messages, whatever its wait_s: httplib's read timeout
// is the only deadline a stream has, and it also bounds the wait for "created" and for history
// (etcd sends the events of a watch that starts in the past from a loop that runs every 100 ms).
constexpr double kMinWatchReadS = 0.25;
// A watch stream that sends more than this without a line end is not etcd.
constexpr size_t kMaxWatchLineBytes = size_t{256} << 20;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The gateway sends its error answers chunked with a trailer (Grpc-Trailer-Content-Type), which
// httplib 0.11 cannot read: it fails with Read after the whole body. A status and a body that is
// one complete JSON value are an answer all the same.
bool Answered(httplib::Error e, int status, const std::string& body) {
  return e == httplib::Error::Read && status > 0 && json::accept(body);
}

// Debian's httplib 0.11 sends without MSG_NOSIGNAL: a write to a connection the member reset
// (it closed an idle one just as we reused it) would raise SIGPIPE and end the process. Blocks
// SIGPIPE in this thread for one request and discards one raised meanwhile.
// (common/sigpipe.h: ScopedSigpipeBlock.)

httplib::Request JsonPost(const char* path, const std::string& body) {
  httplib::Request request;
  request.method = "POST";
  request.path = path;
  request.body = body;
  request.set_header("Content-Type", "application/json");
  return request;
}

std::pair<time_t, time_t> SecondsAndMicros(double t_s) {
  const double whole_s = std::floor(t_s);
  return {static_cast<time_t>(whole_s), static_cast<time_t>((t_s - whole_s) * 1e6)};
}

// A client for one member: with TLS, etcd's CA (else the system's) and our certificate.
std::unique_ptr<httplib::Client> NewClient(const std::string& url, const EtcdTls& tls) {
  auto client = tls.cert_file.empty()
                    ? std::make_unique<httplib::Client>(url)
                    : std::make_unique<httplib::Client>(url, tls.cert_file, tls.key_file);
  if (!tls.cacert_file.empty()) client->set_ca_cert_path(tls.cacert_file);
  return client;
}

void Configure(httplib::Client& client, double timeout_s, double read_timeout_s) {
  client.set_tcp_nodelay(true);  // without it each request waits ~40 ms on delayed ACKs
  const auto [s, us] = SecondsAndMicros(timeout_s);
  client.set_connection_timeout(s, us);
  client.set_write_timeout(s, us);
  const auto [read_s, read_us] = SecondsAndMicros(read_timeout_s);
  client.set_read_timeout(read_s, read_us);
}

}  // namespace

Result<EtcdCredentials> ReadEtcdCredentials(const std::string& user,
                                            const std::string& password_file) {
  if (user.empty()) return EtcdCredentials{};
  if (password_file.empty()) {
    return Error::Usage("--etcd-user " + user + ": needs --etcd-password-file");
  }
  auto read = ReadRegularFileCapped(password_file, kMaxSmallFileBytes, "--etcd-password-file");
  if (!read) return std::move(read).error();
  std::string password = read->substr(0, read->find('\n'));
  while (!password.empty() && (password.back() == '\r' || password.back() == ' ')) {
    password.pop_back();
  }
  if (password.empty()) return Error::Input(password_file + ":1: the password is empty");
  return EtcdCredentials{user, password};
}

Status CheckEtcdAccess(const std::string& endpoints, const EtcdTls& tls) {
  Result<std::vector<std::string>> urls = ParseEndpoints(endpoints);
  if (!urls.ok()) return std::move(urls).error();
  const bool any_tls = !tls.cacert_file.empty() || !tls.cert_file.empty() || !tls.key_file.empty();
  if (any_tls && urls->front().rfind("https://", 0) != 0) {
    return Error::Usage(fmt::format(
        "--etcd-cacert, --etcd-cert and --etcd-key need https:// (or etcds://) endpoints, not "
        "'{}'",
        endpoints));
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return Error::Usage(
        "--etcd-cert and --etcd-key go together (the client's certificate and key)");
  }
  for (const auto& [file, flag] :
       {std::pair{tls.cacert_file, "--etcd-cacert"}, std::pair{tls.cert_file, "--etcd-cert"},
        std::pair{tls.key_file, "--etcd-key"}}) {
    if (file.empty()) continue;
    if (access(file.c_str(), R_OK) != 0) {
      return Error::Input(
          fmt::format("{}: cannot read ({}): {}", file, flag, std::strerror(errno)));
    }
    // TLS reads them whole at start: a FIFO would hang it there.
    struct stat st {};
    if (::stat(file.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      return Error::Input(
          fmt::format("{} {}: is {}, not a regular file", flag, file, FileTypeName(st.st_mode)));
    }
  }
  return CheckTlsFiles(tls);
}

Result<std::unique_ptr<EtcdStore>> EtcdStore::Open(const std::string& endpoints, double timeout_s,
                                                   const EtcdCredentials& credentials,
                                                   const EtcdTls& tls, EtcdKeepAlive keepalive) {
  if (!(timeout_s > 0)) {
    return Error::Usage(fmt::format("etcd timeout {} s: must be positive", timeout_s));
  }
  if (Status st = CheckEtcdAccess(endpoints, tls); !st) return std::move(st).error();
  Result<std::vector<std::string>> urls = ParseEndpoints(endpoints);
  if (!urls.ok()) return std::move(urls).error();
  std::unique_ptr<EtcdStore> store(
      new EtcdStore(std::move(*urls), timeout_s, credentials, tls, keepalive));
  Result<Answer> status = store->Post("/v3/maintenance/status", "{}", Resend::kHarmless);
  if (!status.ok()) return std::move(status).error();
  if (!credentials.user.empty()) {
    MutexLock lock(store->mu_);
    if (Status a = store->AuthenticateLocked(); !a.ok()) return std::move(a).error();
  }
  return store;
}

EtcdStore::EtcdStore(std::vector<std::string> urls, double timeout_s, EtcdCredentials credentials,
                     EtcdTls tls, EtcdKeepAlive keepalive)
    : urls_(std::move(urls)),
      timeout_s_(timeout_s),
      credentials_(std::move(credentials)),
      tls_(std::move(tls)),
      keepalive_(keepalive) {
  if (keepalive_ == EtcdKeepAlive::kGrpcStream) {
    LeaseStream::TokenSource token;
    if (!credentials_.user.empty()) {
      token = [this] {
        MutexLock lock(mu_);
        return token_;
      };
    }
    lease_stream_ = std::make_unique<LeaseStream>(urls_, timeout_s_, tls_, std::move(token));
  }
  MutexLock lock(mu_);
  for (const std::string& url : urls_) {
    auto client = NewClient(url, tls_);
    Configure(*client, timeout_s_, timeout_s_);
    client->set_keep_alive(true);
    clients_.push_back(std::move(client));
  }
}

// The stream first: its token source reads mu_ and token_.
EtcdStore::~EtcdStore() { lease_stream_.reset(); }

std::string EtcdStore::Describe() const {
  std::string out;
  for (const std::string& url : urls_) {
    if (!out.empty()) out += ',';
    out += url;
  }
  return out;
}

Result<EtcdStore::Answer> EtcdStore::Post(const char* path, const std::string& body,
                                          Resend resend) {
  MutexLock lock(mu_);
  Result<Answer> a = PostLocked(path, body, resend);
  // An expired token (etcd's simple tokens last 5 minutes without use): renewed once. etcd
  // refused the request before applying it, so sending it again is safe.
  if (!a.ok() && !credentials_.user.empty() && a.error().kind() == ErrorKind::kUnauthenticated) {
    token_.clear();
    if (Status s = AuthenticateLocked(); !s.ok()) return std::move(s).error();
    a = PostLocked(path, body, resend);
  }
  return a;
}

Status EtcdStore::AuthenticateLocked() {
  token_.clear();
  const json request = {{"name", credentials_.user}, {"password", credentials_.password}};
  Result<Answer> a = PostLocked("/v3/auth/authenticate", request.dump(), Resend::kHarmless);
  if (!a.ok()) {
    return Error::Io(
        fmt::format("etcd: authenticate as '{}': {}", credentials_.user, a.error().message()));
  }
  const json answer = json::parse(a->body, nullptr, false);
  if (!answer.is_object() || !answer.contains("token") || !answer["token"].is_string()) {
    return Error::Io(fmt::format("etcd at {}: authenticate as '{}': no token in the answer", a->url,
                                 credentials_.user));
  }
  token_ = answer["token"].get<std::string>();
  return OkStatus();
}

Result<EtcdStore::Answer> EtcdStore::PostLocked(const char* path, const std::string& body,
                                                Resend resend) {
  const size_t n = urls_.size();
  const size_t first = current_;
  std::string tried;  // "url: what went wrong; ..."
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (first + k) % n;
    const std::string& url = urls_[i];
    int status = 0;
    std::string received;
    httplib::Request request = JsonPost(path, body);
    if (!token_.empty()) request.set_header("Authorization", token_);
    request.response_handler = [&status](const httplib::Response& r) {
      status = r.status;
      return true;
    };
    request.content_receiver = [&received](const char* data, size_t size, uint64_t, uint64_t) {
      received.append(data, size);
      return true;
    };
    // clients_ is read here, with mu_ held (REQUIRES); the deadline's lambda gets the pointer,
    // as the analysis does not follow the lock into a lambda.
    httplib::Client* client = clients_[i].get();
    request_deadline_.Arm(kWholeRequestTimeouts * timeout_s_, [client] { client->stop(); });
    ClearTlsErrors();
    const Clock::time_point start = Clock::now();
    const httplib::Result res = [&] {
      ScopedSigpipeBlock no_sigpipe;
      return client->send(request);
    }();
    const bool cut = request_deadline_.Disarm();
    if (res || Answered(res.error(), status, received)) {
      if (status == 200) {
        current_ = i;
        return Answer{url, std::move(received)};
      }
      const EtcdError e = HttpStatusError(status, received);
      if (e.failure == Failure::kFinal) {
        current_ = i;
        return Error(e.kind, fmt::format("etcd at {}: {}: {}", url, path, e.message));
      }
      current_ = (i + 1) % n;
      if (e.failure == Failure::kMaybeApplied && resend == Resend::kNever) {
        return Error::OutcomeUnknown(
            fmt::format("etcd at {}: {}: {} ({}: it may have been applied)", url, path, e.message,
                        coord::kOutcomeUnknown));
      }
      tried += fmt::format("{}{}: {}", tried.empty() ? "" : "; ", url, e.message);
      continue;
    }
    const httplib::Error error = res.error();
    current_ = (i + 1) % n;
    const std::string why =
        cut ? fmt::format("no whole answer within {} s", kWholeRequestTimeouts * timeout_s_)
            : DescribeFailure(url, *client, error, SecondsSince(start), timeout_s_, timeout_s_,
                              tls_);
    if (!NotSent(error) && resend == Resend::kNever) {
      return Error::OutcomeUnknown(fmt::format("etcd at {}: {}: {} ({}: it may have been applied)",
                                               url, path, why, coord::kOutcomeUnknown));
    }
    tried += fmt::format("{}{}: {}", tried.empty() ? "" : "; ", url, why);
  }
  // No member took it, and none may have applied it.
  return Error::Unavailable(fmt::format("etcd at {}: {}: {}", Describe(), path, tried));
}

Result<coord::RangeResult> EtcdStore::Get(const std::string& key, bool prefix) {
  Result<Answer> a = Post("/v3/kv/range", RangeJson(key, prefix).dump(), Resend::kHarmless);
  if (!a.ok()) return std::move(a).error();
  const json j = json::parse(a->body, nullptr, false);
  AnswerReader r(fmt::format("etcd at {}: /v3/kv/range", a->url));
  coord::RangeResult out;
  out.revision = r.Revision(j);
  out.kvs = r.Kvs(j);
  if (!r.ok()) return r.error();
  return out;
}

Result<int64_t> EtcdStore::Put(const std::string& key, const std::string& value,
                               coord::LeaseId lease) {
  json body = json::object();
  body["key"] = Base64Encode(key);
  body["value"] = Base64Encode(value);
  if (lease != 0) body["lease"] = std::to_string(lease);
  Result<Answer> a = Post("/v3/kv/put", body.dump(), Resend::kNever);
  if (!a.ok()) return std::move(a).error();
  AnswerReader r(fmt::format("etcd at {}: /v3/kv/put", a->url));
  const int64_t revision = r.Revision(json::parse(a->body, nullptr, false));
  if (!r.ok()) return r.error();
  return revision;
}

std::vector<Result<coord::TxnResult>> EtcdStore::TxnEach(
    const std::vector<coord::TxnRequest>& requests) {
  const size_t n = requests.size();
  const size_t lanes = std::min(n, kTxnLanes);
  if (lanes <= 1) return coord::Store::TxnEach(requests);
  std::vector<EtcdStore*> stores{this};
  {
    std::string token;
    {
      MutexLock lock(mu_);
      token = token_;
    }
    MutexLock lock(lanes_mu_);
    while (lanes_.size() + 1 < lanes) {
      lanes_.push_back(std::unique_ptr<EtcdStore>(
          new EtcdStore(urls_, timeout_s_, credentials_, tls_, EtcdKeepAlive::kHttpPost)));
      MutexLock other(lanes_.back()->mu_);
      lanes_.back()->token_ = token;  // renewed by that store when it expires
    }
    for (size_t i = 0; i + 1 < lanes; ++i) stores.push_back(lanes_[i].get());
  }
  std::vector<std::optional<Result<coord::TxnResult>>> answers(n);
  const auto run_lane = [&](size_t lane) {
    for (size_t i = lane; i < n; i += lanes) answers[i] = stores[lane]->Txn(requests[i]);
  };
  std::vector<std::thread> threads;
  for (size_t lane = 1; lane < lanes; ++lane) threads.emplace_back(run_lane, lane);
  run_lane(0);
  for (std::thread& t : threads) t.join();
  std::vector<Result<coord::TxnResult>> out;
  out.reserve(n);
  for (auto& a : answers) out.push_back(std::move(*a));
  return out;
}

Result<int64_t> EtcdStore::Delete(const std::string& key, bool prefix) {
  Result<Answer> a = Post("/v3/kv/deleterange", RangeJson(key, prefix).dump(), Resend::kNever);
  if (!a.ok()) return std::move(a).error();
  AnswerReader r(fmt::format("etcd at {}: /v3/kv/deleterange", a->url));
  const int64_t revision = r.Revision(json::parse(a->body, nullptr, false));
  if (!r.ok()) return r.error();
  return revision;
}

Result<coord::TxnResult> EtcdStore::Txn(const coord::TxnRequest& request) {
  json body = json::object();
  body["compare"] = json::array();
  for (const coord::Compare& c : request.compare) body["compare"].push_back(CompareJson(c));
  body["success"] = json::array();
  for (const coord::Op& op : request.success) body["success"].push_back(OpJson(op));
  body["failure"] = json::array();
  for (const coord::Op& op : request.failure) body["failure"].push_back(OpJson(op));
  const bool writes = Writes(request.success) || Writes(request.failure);
  Result<Answer> a = Post("/v3/kv/txn", body.dump(), writes ? Resend::kNever : Resend::kHarmless);
  if (!a.ok()) return std::move(a).error();
  const json j = json::parse(a->body, nullptr, false);
  AnswerReader r(fmt::format("etcd at {}: /v3/kv/txn", a->url));
  coord::TxnResult out;
  out.revision = r.Revision(j);
  out.succeeded = r.Bool(j, "succeeded");  // absent when false
  const std::vector<coord::Op>& ops = out.succeeded ? request.success : request.failure;
  const json& responses = r.Array(j, "responses");
  if (r.ok() && responses.size() != ops.size()) {
    r.Fail(fmt::format("{} responses to {} operations", responses.size(), ops.size()));
  }
  for (size_t i = 0; r.ok() && i < ops.size(); ++i) {
    const json& response = r.Object(responses[i], ResponseName(ops[i].kind), true);
    out.responses.push_back(ops[i].kind == coord::Op::Kind::kGet ? r.Kvs(response)
                                                                 : std::vector<coord::KeyValue>{});
  }
  if (!r.ok()) return r.error();
  return out;
}

Status EtcdStore::Compact(int64_t revision) {
  json body = json::object();
  body["revision"] = std::to_string(revision);
  Result<Answer> a = Post("/v3/kv/compaction", body.dump(), Resend::kHarmless);
  if (!a.ok()) {
    // Compacting twice to the same revision is harmless: etcd says it is compacted already.
    if (a.error().kind() == ErrorKind::kConflict) return OkStatus();
    return std::move(a).error();
  }
  AnswerReader r(fmt::format("etcd at {}: /v3/kv/compaction", a->url));
  r.Revision(json::parse(a->body, nullptr, false));
  if (!r.ok()) return r.error();
  return OkStatus();
}

namespace {

// The messages of one watch stream, one JSON object a line, parsed as they come. Without
// `follow`, the stream is done at the first message with events, a compaction, a cancellation or
// an error. With it, each is told to `follow` as it comes (the creation too, with no events),
// and the stream goes on until `follow` returns false, a compaction, a cancellation or an error.
class WatchStream {
 public:
  using Follow = std::function<bool(const coord::WatchResult&)>;
  WatchStream(std::string where, const Follow* follow = nullptr)
      : where_(std::move(where)), follow_(follow) {}

  // Returns false to stop the stream.
  bool Add(const char* data, size_t size) {
    buffer_.append(data, size);
    size_t start = 0;
    for (size_t nl = buffer_.find('\n'); nl != std::string::npos; nl = buffer_.find('\n', start)) {
      const std::string_view line = std::string_view(buffer_).substr(start, nl - start);
      start = nl + 1;
      if (!Line(line)) {
        done_ = true;
        return false;
      }
    }
    buffer_.erase(0, start);
    if (buffer_.size() > kMaxWatchLineBytes) {
      error_ =
          Error::Io(fmt::format("{}: a message longer than {} bytes", where_, kMaxWatchLineBytes));
      done_ = true;
      return false;
    }
    return true;
  }
  // What is left unparsed: the body of an error answer without a line end.
  const std::string& rest() const { return buffer_; }

  bool created() const { return created_; }
  bool done() const { return done_; }
  const std::optional<Error>& error() const { return error_; }
  coord::WatchResult& result() { return result_; }

 private:
  bool Line(std::string_view line) {
    if (line.find_first_not_of(" \r\t") == std::string_view::npos) return true;
    const json j = json::parse(line, nullptr, false);
    if (std::optional<EtcdError> e = ErrorOf(j)) {
      error_ = Error(e->kind, fmt::format("{}: {}", where_, e->message));
      return false;
    }
    AnswerReader r(where_);
    const json& message = r.Object(j, "result", true);
    // The compaction's message carries no revision: keep the one "created" had.
    if (const int64_t revision = r.Int(r.Object(message, "header", false), "revision");
        revision > 0) {
      result_.revision = revision;
    }
    const bool created_now = r.Bool(message, "created");
    if (created_now) created_ = true;
    const bool canceled = r.Bool(message, "canceled");
    const int64_t compact_revision = r.Int(message, "compact_revision");
    const std::string cancel_reason = r.String(message, "cancel_reason");
    for (const json& e : r.Array(message, "events")) {
      coord::WatchEvent event;
      const std::string type = r.String(e, "type");  // absent: PUT, the zero value
      if (type == "DELETE") {
        event.type = coord::WatchEvent::Type::kDelete;
      } else if (!type.empty() && type != "PUT") {
        r.Fail(fmt::format("event type '{}'", type));
      }
      event.kv = r.Kv(r.Object(e, "kv", true));
      result_.events.push_back(std::move(event));
    }
    if (!r.ok()) {
      error_ = r.error();
      return false;
    }
    if (compact_revision > 0) {
      result_.compacted = true;
      if (follow_ != nullptr) (*follow_)(result_);
      return false;
    }
    if (canceled) {
      error_ = Error::Io(fmt::format("{}: watch canceled: {}", where_,
                                     cancel_reason.empty() ? "no reason given" : cancel_reason));
      return false;
    }
    if (follow_ != nullptr && created_now && !(*follow_)(result_)) return false;
    if (result_.events.empty()) return true;
    // etcd sends a long history in parts (1000 revisions each), every part stamped with the
    // current revision: a caller resuming from `revision` would skip the parts not yet read.
    result_.revision = std::min(result_.revision, result_.events.back().kv.mod_revision);
    if (follow_ == nullptr) return false;
    const bool more = (*follow_)(result_);
    result_.events.clear();
    return more;
  }

  std::string where_;
  const Follow* follow_;
  std::string buffer_;
  bool created_ = false;
  bool done_ = false;
  std::optional<Error> error_;
  coord::WatchResult result_;
};

}  // namespace

Result<coord::WatchResult> EtcdStore::Watch(const std::string& key, bool prefix,
                                            int64_t after_revision, double wait_s) {
  return Stream(key, prefix, after_revision, wait_s, nullptr);
}

Result<int64_t> EtcdStore::Follow(const std::string& key, bool prefix, int64_t after_revision,
                                  double quiet_s,
                                  const std::function<bool(const coord::WatchResult&)>& on_change) {
  auto r = Stream(key, prefix, after_revision, quiet_s, &on_change);
  if (!r) return std::move(r).error();
  return r->compacted ? after_revision : std::max(after_revision, r->revision);
}

void EtcdStore::CancelFollows() {
  MutexLock lock(follow_mu_);
  follows_canceled_ = true;
  for (httplib::Client* c : following_) c->stop();
}

Result<coord::WatchResult> EtcdStore::Stream(
    const std::string& key, bool prefix, int64_t after_revision, double wait_s,
    const std::function<bool(const coord::WatchResult&)>* follow) {
  json create = RangeJson(key, prefix);
  create["start_revision"] = std::to_string(after_revision + 1);
  json body = json::object();
  body["create_request"] = std::move(create);
  const std::string body_text = body.dump();
  const double read_timeout_s = std::max(wait_s, kMinWatchReadS);

  size_t first = 0;
  std::string token;
  {
    MutexLock lock(mu_);
    first = current_;
    token = token_;
  }
  const size_t n = urls_.size();
  std::string tried;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (first + k) % n;
    const std::string& url = urls_[i];
    WatchStream stream(fmt::format("etcd at {}: /v3/watch", url), follow);
    // Its own connection: the stream is stopped by closing it, and it must not hold mu_.
    const std::unique_ptr<httplib::Client> owned = NewClient(url, tls_);
    httplib::Client& client = *owned;
    Configure(client, timeout_s_, read_timeout_s);
    // A follow is known to CancelFollows while it runs (which stops its connection).
    struct Registration {
      EtcdStore* store;
      httplib::Client* client;
      ~Registration() {
        if (client == nullptr) return;
        MutexLock lock(store->follow_mu_);
        store->following_.erase(client);
      }
    } registration{this, nullptr};
    if (follow != nullptr) {
      MutexLock lock(follow_mu_);
      if (follows_canceled_) return Error::Io(fmt::format("etcd at {}: /v3/watch: canceled", url));
      following_.insert(&client);
      registration.client = &client;
    }
    int status = 0;
    httplib::Request request = JsonPost("/v3/watch", body_text);
    if (!token.empty()) request.set_header("Authorization", token);
    request.response_handler = [&status](const httplib::Response& r) {
      status = r.status;
      return true;
    };
    request.content_receiver = [&stream](const char* data, size_t size, uint64_t, uint64_t) {
      return stream.Add(data, size);
    };
    ClearTlsErrors();
    const Clock::time_point start = Clock::now();
    const httplib::Result res = [&] {
      ScopedSigpipeBlock no_sigpipe;
      return client.send(request);
    }();
    const double elapsed_s = SecondsSince(start);
    if (stream.error()) return *stream.error();
    if (follow != nullptr) {
      MutexLock lock(follow_mu_);
      if (follows_canceled_) return Error::Io(fmt::format("etcd at {}: /v3/watch: canceled", url));
    }
    if (status > 0 && status != 200) {
      const EtcdError e = HttpStatusError(status, stream.rest());
      if (e.failure == Failure::kFinal) {
        return Error(e.kind, fmt::format("etcd at {}: /v3/watch: {}", url, e.message));
      }
      tried += fmt::format("{}{}: {}", tried.empty() ? "" : "; ", url, e.message);
      MutexLock lock(mu_);
      current_ = (i + 1) % n;
      continue;
    }
    // Done at an event or compaction; or created and quiet until the read timed out.
    const bool timed_out =
        !res && res.error() == httplib::Error::Read && elapsed_s >= read_timeout_s * 0.9;
    if (stream.done() || (stream.created() && timed_out)) {
      MutexLock lock(mu_);
      current_ = i;
      return std::move(stream.result());
    }
    // Not created in time, or the stream ended early: another member may do better.
    const std::string what =
        res ? std::string("the stream ended early")
            : DescribeFailure(url, client, res.error(), elapsed_s, timeout_s_,
                              stream.created() ? wait_s : read_timeout_s, tls_);
    tried += fmt::format("{}{}: {}", tried.empty() ? "" : "; ", url, what);
    MutexLock lock(mu_);
    current_ = (i + 1) % n;
  }
  return Error::Io(fmt::format("etcd at {}: /v3/watch: {}", Describe(), tried));
}

}  // namespace headroom::etcd
