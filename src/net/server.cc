#include "net/server.h"

#include "net/beast_request.h"

// Boost 1.74's asio headers use std::exchange and std::optional without including them.
#include <optional>
#include <utility>

#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cassert>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <list>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/thread_annotations.h"

namespace headroom::net {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
using SteadyClock = std::chrono::steady_clock;

constexpr size_t kReadChunkBytes = 4096;
constexpr auto kDrainTime = std::chrono::milliseconds(500);   // reading after a closing answer
constexpr auto kAcceptRetry = std::chrono::milliseconds(50);  // after EMFILE and the like
constexpr auto kStopWait = std::chrono::milliseconds(500);    // for the loop to close everything
constexpr int kSpareDescriptors = 64;  // kept free for traces, NVML, the store and the like

SteadyClock::duration Seconds(double s) {
  return std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(s));
}

constexpr std::string_view kRefusal =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    "Content-Length: 33\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
    "{\"error\":\"too many connections\"}\n";
static_assert(std::string_view("{\"error\":\"too many connections\"}\n").size() == 33);

// A handler that throws (out of memory, say) answers 500; the loop goes on serving the others.
template <class F>
Response Guarded(F&& f) {
  try {
    return f();
  } catch (const std::exception&) {
    return ErrorResponse(500, "internal error");
  }
}

// Offloaded work: `threads` workers, at most `capacity` jobs waiting.
class WorkQueue {
 public:
  // `nice`: added to each worker thread's nice value (0: as the daemon's).
  void Start(int threads, int capacity, int nice = 0) {
    capacity_ = static_cast<size_t>(std::max(capacity, 0));
    for (int i = 0; i < threads; ++i) {
      workers_.emplace_back([this, nice] {
        // Linux: a thread's nice value is its own, set absolutely: `nice` above the one it
        // inherited from the daemon (at most 19). Best effort: a failure leaves it as it was.
        if (nice != 0) {
          const auto tid = static_cast<id_t>(gettid());
          errno = 0;
          const int inherited = getpriority(PRIO_PROCESS, tid);
          if (errno == 0) (void)setpriority(PRIO_PROCESS, tid, std::min(19, inherited + nice));
        }
        Run();
      });
    }
  }
  // False when the queue is full or stopping: the job is not taken.
  bool TryPush(std::function<void()> job) EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      if (stopping_ || jobs_.size() >= capacity_) return false;
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
    return true;
  }
  // Drops the jobs still waiting; joins once those in progress return.
  void Stop() EXCLUDES(mu_) {
    std::deque<std::function<void()>> dropped;
    {
      MutexLock lock(mu_);
      stopping_ = true;
      dropped.swap(jobs_);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

 private:
  void Run() EXCLUDES(mu_) {
    for (;;) {
      std::function<void()> job;
      {
        MutexLock lock(mu_);
        cv_.wait(mu_, [this]() REQUIRES(mu_) { return stopping_ || !jobs_.empty(); });
        if (stopping_) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  size_t capacity_ = 0;
  std::vector<std::thread> workers_;
  Mutex mu_;
  std::condition_variable_any cv_;
  std::deque<std::function<void()>> jobs_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
};

}  // namespace

class Connection;

class Server::Impl {
 public:
  Impl(ServerLimits server_limits, std::string daemon_name)
      : limits(server_limits), daemon(std::move(daemon_name)) {}

  void Accept();
  void Shutdown();
  void WakeParked();
  // At a cap: closes the connection idle the longest (from `address` when given).
  bool Evict(const std::string* address);
  void MarkIdle(Connection* c);
  void MarkBusy(Connection* c);
  void Forget(Connection* c);

  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_retry{io};
  ServerLimits limits;  // constant once serving
  const std::string daemon;
  Handler* handler = nullptr;  // set by Serve
  WorkQueue work;
  WorkQueue bulk;  // Lane::kBulk, when limits.bulk_threads > 0

  // Io thread only.
  bool stopping = false;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> all;
  std::list<Connection*> idle;  // front: idle the longest
  std::unordered_map<std::string, int> per_address;
  std::unordered_set<Connection*> parked;

  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> refused{0};
  std::atomic<uint64_t> evicted{0};
  std::atomic<uint64_t> timed_out{0};
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> busy{0};
  std::atomic<int> open{0};
  std::atomic<int> idle_count{0};

  Mutex finished_mu;
  std::condition_variable_any finished_cv;
  bool finished GUARDED_BY(finished_mu) = false;  // run() has returned

 private:
  void OnAccept(tcp::socket socket);
  void Refuse(tcp::socket& socket);
};

// One client connection, driven by the io thread: a request's life is idle -> header -> body
// -> (parked or working) -> writing -> idle again (keep-alive) or draining -> closed.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Server::Impl& server, tcp::socket socket, std::string address)
      : server_(server),
        socket_(std::move(socket)),
        timer_(server.io),
        address_(std::move(address)),
        buffer_(server.limits.max_header_bytes + kReadChunkBytes) {}

  void Start() {
    NewParser();
    phase_ = Phase::kIdle;
    server_.MarkIdle(this);
    SetDeadline(server_.limits.idle_timeout_s);
    WaitDeadline();
    Read();
  }

  void Close() {
    if (phase_ == Phase::kClosed) return;
    if (phase_ == Phase::kParked) {
      server_.parked.erase(this);
      Guarded([&] { return server_.handler->EndPark(park_after_); });  // unanswered
    }
    phase_ = Phase::kClosed;
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    timer_.cancel();
    hold_.reset();  // the body itself lives until a write in flight returns
    server_.Forget(this);
  }

  // A parked request: answer it now.
  void Unpark() {
    if (phase_ != Phase::kParked) return;
    server_.parked.erase(this);
    Respond(Guarded([&] { return server_.handler->EndPark(park_after_); }));
  }

  // Offloaded work's answer, posted back to the loop.
  void Finish(Response r) {
    if (phase_ != Phase::kWorking) return;  // closed meanwhile
    Respond(std::move(r));
  }

  bool parked() const { return phase_ == Phase::kParked; }
  uint64_t park_after() const { return park_after_; }
  const std::string& address() const { return address_; }

  std::list<Connection*>::iterator idle_it;
  bool in_idle = false;

 private:
  enum class Phase { kIdle, kHeader, kBody, kParked, kWorking, kWriting, kDraining, kClosed };

  void NewParser() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(server_.limits.max_header_bytes));
    parser_->body_limit(server_.limits.max_body_bytes);
  }

  void SetDeadline(double seconds) { timer_.expires_after(Seconds(seconds)); }
  void SetDeadline(SteadyClock::duration d) { timer_.expires_after(d); }

  // One wait at a time; moving the deadline cancels it, and the handler waits again.
  void WaitDeadline() {
    timer_.async_wait([self = shared_from_this()](error_code) {
      if (self->phase_ == Phase::kClosed) return;
      if (self->timer_.expiry() <= SteadyClock::now()) self->OnDeadline();
      if (self->phase_ != Phase::kClosed) self->WaitDeadline();
    });
  }

  void OnDeadline() {
    if (phase_ == Phase::kParked) return Unpark();  // the park's own timeout
    if (phase_ == Phase::kWorking) return;          // no deadline: the work's own timeouts
    if (phase_ != Phase::kDraining) ++server_.timed_out;
    Close();
  }

  void Read() {
    if (reading_ || phase_ == Phase::kClosed) return;
    const size_t room = buffer_.max_size() - buffer_.size();
    if (room == 0) {
      return Respond(ErrorResponse(431, "request header too large"), /*close_after=*/true);
    }
    reading_ = true;
    socket_.async_read_some(buffer_.prepare(std::min(room, kReadChunkBytes)),
                            [self = shared_from_this()](error_code ec, size_t n) {
                              self->reading_ = false;
                              self->OnRead(ec, n);
                            });
  }

  void OnRead(error_code ec, size_t n) {
    if (phase_ == Phase::kClosed) return;
    if (ec) return Close();  // end of stream, reset, or closed by a deadline
    buffer_.commit(n);
    if (phase_ == Phase::kDraining) {
      buffer_.consume(buffer_.size());
      return Read();
    }
    if (phase_ == Phase::kParked || phase_ == Phase::kWorking || phase_ == Phase::kWriting) {
      return;  // kept for later
    }
    Feed();
  }

  void Feed() {
    if (phase_ == Phase::kIdle && buffer_.size() > 0) {
      phase_ = Phase::kHeader;
      server_.MarkBusy(this);
      SetDeadline(server_.limits.header_timeout_s);
    }
    while (buffer_.size() > 0) {
      error_code ec;
      const size_t used = parser_->put(buffer_.data(), ec);
      buffer_.consume(used);
      if (ec == http::error::need_more) break;
      if (ec) return Reject(ec);
      if (phase_ == Phase::kHeader && parser_->is_header_done()) {
        if (auto why = FramingError(parser_->get())) {
          return Respond(ErrorResponse(400, "malformed HTTP request: " + *why), true);
        }
        phase_ = Phase::kBody;
        SetDeadline(server_.limits.body_timeout_s);
        ContinueIfExpected();
      }
      if (parser_->is_done()) return Dispatch();
      if (used == 0) break;
    }
    Read();
  }

  // `Expect: 100-continue` (curl sends it before bodies over 1 KiB): say so at once. A short
  // write on a fresh connection's empty send buffer; if it would block, the client sends its
  // body after its own wait anyway.
  void ContinueIfExpected() {
    const auto& req = parser_->get();
    const auto expect = req.find(http::field::expect);
    if (expect == req.end() || !beast::iequals(expect->value(), "100-continue")) return;
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    error_code ignored;
    socket_.write_some(asio::buffer(kContinue.data(), kContinue.size()), ignored);
  }

  void Reject(error_code ec) {
    if (ec == http::error::header_limit) {
      return Respond(ErrorResponse(431, "request header too large"), true);
    }
    if (ec == http::error::body_limit) {
      return Respond(ErrorResponse(413, fmt::format("body larger than {} bytes",
                                                    server_.limits.max_body_bytes)),
                     true);
    }
    Respond(ErrorResponse(400, "malformed HTTP request: " + ec.message()), true);
  }

  void Dispatch() {
    ++server_.requests;
    const auto& req = parser_->get();
    keep_alive_ = req.keep_alive();
    head_ = req.method() == http::verb::head;
    Response response = Guarded([&] { return server_.handler->Handle(ToRequest(req)); });
    if (response.park) {
      // A Wake() after Handle's check runs after this handler, when this connection is already
      // in `parked`.
      phase_ = Phase::kParked;
      park_after_ = response.park->after;
      server_.parked.insert(this);
      SetDeadline(response.park->wait_s);
      if (server_.stopping) Unpark();
      return;
    }
    if (response.offload) return Offload(std::move(response.offload), response.lane);
    Respond(std::move(response));
  }

  // Off the loop: the worker holds only a weak reference, and the answer comes back to the
  // loop, to a connection that may have closed meanwhile.
  void Offload(std::function<Response()> work, Lane lane) {
    const bool bulk = lane == Lane::kBulk && server_.limits.bulk_threads > 0;
    if (!bulk && server_.limits.worker_threads <= 0) return Respond(Guarded(work));
    phase_ = Phase::kWorking;
    timer_.expires_at(SteadyClock::time_point::max());
    std::weak_ptr<Connection> weak = weak_from_this();
    asio::io_context& io = server_.io;
    const bool queued =
        (bulk ? server_.bulk : server_.work).TryPush([weak, &io, work = std::move(work)] {
          Response r = Guarded(work);
          asio::post(io, [weak, r = std::move(r)]() mutable {
            if (auto self = weak.lock()) self->Finish(std::move(r));
          });
        });
    if (!queued) {
      ++server_.busy;
      Respond(Unavailable(bulk ? "busy: too many requests waiting; try again"
                               : "busy: too many requests waiting for the store; try again"));
    }
  }

  void Respond(Response r, bool close_after = false) {
    if (close_after || server_.stopping) keep_alive_ = false;
    response_ = {};
    response_.version(11);
    response_.result(static_cast<unsigned>(r.status));
    response_.set(http::field::content_type, r.content_type);
    response_.set(http::field::cache_control, "no-store");
    response_.set("X-Content-Type-Options", "nosniff");
    for (const auto& [name, value] : r.headers) response_.set(name, value);
    response_.keep_alive(keep_alive_);
    response_.body() = std::move(r.body);
    hold_ = std::move(r.hold);
    response_.prepare_payload();
    if (head_) response_.body().clear();  // Content-Length stays: what GET would send
    phase_ = Phase::kWriting;
    SetDeadline(server_.limits.write_timeout_s);
    http::async_write(socket_, response_,
                      [self = shared_from_this()](error_code ec, size_t) { self->OnWritten(ec); });
  }

  void OnWritten(error_code ec) {
    if (phase_ == Phase::kClosed) return;
    // Written: the answer's memory goes now, not when the connection next answers or closes.
    response_ = {};
    hold_.reset();
    if (ec) return Close();
    if (!keep_alive_) {
      // Send our end, then read and discard until the client closes (or briefly), so that an
      // unread request body does not turn our close into a reset that loses the answer.
      phase_ = Phase::kDraining;
      server_.MarkIdle(this);  // answered: the first to go at a cap
      error_code ignored;
      socket_.shutdown(tcp::socket::shutdown_send, ignored);
      buffer_.consume(buffer_.size());
      SetDeadline(kDrainTime);
      return Read();
    }
    NewParser();
    phase_ = Phase::kIdle;
    server_.MarkIdle(this);
    SetDeadline(server_.limits.idle_timeout_s);
    if (buffer_.size() > 0) return Feed();  // a pipelined request
    Read();
  }

  Server::Impl& server_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  std::string address_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> response_;
  std::shared_ptr<const void> hold_;  // the answer's (Response::hold) until it is written
  Phase phase_ = Phase::kIdle;
  bool reading_ = false;
  bool keep_alive_ = true;
  bool head_ = false;
  uint64_t park_after_ = 0;
};

void Server::Impl::Accept() {
  acceptor.async_accept([this](error_code ec, tcp::socket socket) {
    if (stopping) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      // Out of descriptors or buffers: try again shortly instead of spinning.
      accept_retry.expires_after(kAcceptRetry);
      accept_retry.async_wait([this](error_code e) {
        if (!e && !stopping) Accept();
      });
      return;
    }
    OnAccept(std::move(socket));
    Accept();
  });
}

void Server::Impl::OnAccept(tcp::socket socket) {
  error_code ec;
  const tcp::endpoint remote = socket.remote_endpoint(ec);
  if (ec) return;  // already gone
  std::string address = remote.address().to_string();
  const auto count = per_address.find(address);
  if (count != per_address.end() && count->second >= limits.max_connections_per_address) {
    if (!Evict(&address)) return Refuse(socket);
  } else if (open.load() >= limits.max_connections) {
    if (!Evict(nullptr)) return Refuse(socket);
  }
  socket.set_option(tcp::no_delay(true), ec);  // small JSON answers: no Nagle delay
  socket.non_blocking(true, ec);
  auto c = std::make_shared<Connection>(*this, std::move(socket), address);
  all.emplace(c.get(), c);
  ++per_address[address];
  ++open;
  ++accepted;
  c->Start();
}

void Server::Impl::Refuse(tcp::socket& socket) {
  ++refused;
  error_code ignored;
  socket.non_blocking(true, ignored);
  socket.write_some(asio::buffer(kRefusal.data(), kRefusal.size()), ignored);
  socket.shutdown(tcp::socket::shutdown_both, ignored);
  socket.close(ignored);
}

bool Server::Impl::Evict(const std::string* address) {
  for (Connection* c : idle) {
    if (address != nullptr && c->address() != *address) continue;
    ++evicted;
    c->Close();  // removes it from `idle`
    return true;
  }
  return false;
}

void Server::Impl::MarkIdle(Connection* c) {
  if (c->in_idle) return;
  c->idle_it = idle.insert(idle.end(), c);
  c->in_idle = true;
  ++idle_count;
}

void Server::Impl::MarkBusy(Connection* c) {
  if (!c->in_idle) return;
  idle.erase(c->idle_it);
  c->in_idle = false;
  --idle_count;
}

void Server::Impl::Forget(Connection* c) {
  MarkBusy(c);
  parked.erase(c);
  if (all.erase(c) == 0) return;
  --open;
  const auto it = per_address.find(c->address());
  if (it != per_address.end() && --it->second <= 0) per_address.erase(it);
}

void Server::Impl::WakeParked() {
  std::vector<Connection*> ready;
  for (Connection* c : parked) {
    if (handler->Ready(c->park_after())) ready.push_back(c);
  }
  for (Connection* c : ready) c->Unpark();
}

void Server::Impl::Shutdown() {
  stopping = true;
  error_code ignored;
  acceptor.close(ignored);
  accept_retry.cancel();
  std::vector<std::shared_ptr<Connection>> open_now;
  for (auto& [raw, weak] : all) {
    if (auto c = weak.lock()) open_now.push_back(std::move(c));
  }
  for (auto& c : open_now) c->Close();
  // No io.stop(): the handlers still queued (an accept that completed, a read) must run to
  // close what they hold; then nothing is left and run() returns. Stop() bounds the wait.
}

Server::Server(ServerLimits limits, std::string daemon)
    : impl_(std::make_unique<Impl>(limits, std::move(daemon))) {}

Server::~Server() { Stop(); }

Status Server::Bind(const std::string& host, int port) {
  Impl& s = *impl_;
  assert(!s.acceptor.is_open());
  error_code ec;
  tcp::endpoint endpoint;
  const auto address = asio::ip::make_address(host, ec);
  if (!ec) {
    endpoint = tcp::endpoint(address, static_cast<unsigned short>(port));
  } else {
    tcp::resolver resolver(s.io);
    const auto results = resolver.resolve(host, std::to_string(port), ec);
    if (ec || results.empty()) {
      return Error::Usage(fmt::format("{}: cannot listen on '{}': cannot resolve it: {}", s.daemon,
                                      host, ec.message()));
    }
    endpoint = results.begin()->endpoint();
  }
  const std::string where = fmt::format("{}:{}", host, port);
  // SO_REUSEADDR lets a restart bind while old connections linger in TIME_WAIT; on Linux it
  // does not let two sockets listen on one port. No SO_REUSEPORT: that would.
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    error_code ignored;
    s.acceptor.close(ignored);
    if (ec == asio::error::address_in_use) {
      return Error::Io(fmt::format("{}: cannot listen on {}: the port is in use (another {}?)",
                                   s.daemon, where, s.daemon));
    }
    return Error::Io(fmt::format("{}: cannot listen on {}: {}", s.daemon, where, ec.message()));
  }
  port_ = s.acceptor.local_endpoint().port();

  // Every connection is a descriptor: raise the soft limit as far as the cap needs (and the
  // hard limit allows), and keep the cap within it.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
    const rlim_t want = static_cast<rlim_t>(s.limits.max_connections + kSpareDescriptors);
    if (files.rlim_cur < want) {
      rlimit raised = files;
      raised.rlim_cur = std::min(want, files.rlim_max);
      if (setrlimit(RLIMIT_NOFILE, &raised) == 0) files = raised;
    }
    const auto usable = static_cast<long long>(files.rlim_cur) - kSpareDescriptors;
    s.limits.max_connections =
        static_cast<int>(std::clamp<long long>(usable, 1, s.limits.max_connections));
  }
  return OkStatus();
}

void Server::Serve(Handler& handler) {
  Impl* impl = impl_.get();
  assert(impl->acceptor.is_open() && !thread_.joinable());
  impl->handler = &handler;
  impl->work.Start(impl->limits.worker_threads, impl->limits.max_queued_work);
  impl->bulk.Start(impl->limits.bulk_threads, impl->limits.max_queued_bulk, impl->limits.bulk_nice);
  asio::post(impl->io, [impl] { impl->Accept(); });
  thread_ = std::thread([impl] {
    for (;;) {
      try {
        impl->io.run();
        break;
      } catch (const std::exception&) {
        // A handler failed (out of memory, say): the loop goes on serving the others.
      }
    }
    MutexLock lock(impl->finished_mu);
    impl->finished = true;
    impl->finished_cv.notify_all();
  });
}

Status Server::Start(const std::string& host, int port, Handler& handler) {
  if (auto st = Bind(host, port); !st) return st;
  Serve(handler);
  return OkStatus();
}

void Server::Wake() {
  Impl* impl = impl_.get();
  asio::post(impl->io, [impl] {
    if (impl->handler != nullptr) impl->WakeParked();
  });
}

void Server::Stop() {
  Impl* impl = impl_.get();
  if (!thread_.joinable()) {
    error_code ignored;
    impl->acceptor.close(ignored);  // bound, never served
    return;
  }
  asio::post(impl->io, [impl] { impl->Shutdown(); });
  bool finished = false;
  {
    MutexLock lock(impl->finished_mu);
    finished = WaitUntil(impl->finished_cv, impl->finished_mu, SteadyClock::now() + kStopWait,
                         [impl]() REQUIRES(impl->finished_mu) { return impl->finished; });
  }
  if (!finished) impl->io.stop();  // a handler that would not end: stop the loop regardless
  thread_.join();
  impl->work.Stop();
  impl->bulk.Stop();
  // Let what was queued (a work's answer, or, after io.stop(), anything) close what it holds.
  impl->io.restart();
  impl->io.poll();
}

ConnectionCounters Server::counters() const {
  ConnectionCounters c;
  c.accepted = impl_->accepted.load();
  c.refused = impl_->refused.load();
  c.evicted = impl_->evicted.load();
  c.timed_out = impl_->timed_out.load();
  c.requests = impl_->requests.load();
  c.busy = impl_->busy.load();
  c.open = impl_->open.load();
  c.idle = impl_->idle_count.load();
  return c;
}

}  // namespace headroom::net
