// The HTTP vocabulary both daemons' APIs share with their transport (server.h): one parsed
// request, one answer, and the Handler between them. No sockets and no clock: an API is a
// Handler, driven by the server on its event loop, or by a test or a fuzzer from raw bytes
// (beast_request.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace headroom::net {

inline constexpr size_t kDefaultMaxBodyBytes = 64 * 1024;

// One parsed request: views into the transport's buffers, valid during Handler::Handle. Absent
// headers are nullopt; a repeated Host or Content-Length never gets this far (400).
struct Request {
  std::string_view method;  // as sent: "GET", "POST", ...
  std::string_view target;  // origin form: "/v1/actuation?after=3"
  std::optional<std::string_view> host;
  std::optional<std::string_view> authorization;
  std::optional<std::string_view> content_type;
  std::string_view body;
};

struct Response;

// Which of the transport's workers runs a Response::offload (server.h): the store's (short
// blocking I/O, answered promptly) or the bulk lane's (long CPU work such as a large history,
// at a lower priority, so it never delays the store's).
enum class Lane { kStore, kBulk };

// A request parked until the handler says it may be answered (a long-poll): see Handler.
struct Park {
  uint64_t after = 0;   // the handler's own token: Ready(after), EndPark(after)
  double wait_s = 0.0;  // answered with EndPark(after) at the latest this long after parking
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // Set: no answer yet; the transport parks the request (see Handler::Ready).
  std::optional<Park> park;
  // Set: no answer yet; the work may block (a store's I/O), so the transport runs it off its
  // event loop, on a bounded queue of workers, and answers with what it returns (503 with
  // Retry-After when the queue is full). It must not refer to the Request, whose views end
  // when Handle returns.
  std::function<Response()> offload;
  Lane lane = Lane::kStore;
  // Kept until the answer is written or its connection closes, then released: an API that
  // bounds the bytes of answers still being read releases them here.
  std::shared_ptr<const void> hold;
};

// {"error": message} (JSON-escaped: nothing a client sent is echoed raw), with `status`.
Response ErrorResponse(int status, std::string_view message);
// A JSON body as is.
Response JsonResponse(int status, std::string body);
// 405 with Allow: `allow`.
Response MethodNotAllowed(std::string allow);
// 503 with Retry-After: 1.
Response Unavailable(std::string_view message);

// An API behind the transport. The server calls every method on its one event-loop thread,
// so a Handler needs no lock of its own for the server's sake; none may block on I/O (return
// Response::offload for that) or wait on a lock held across I/O.
class Handler {
 public:
  virtual ~Handler() = default;
  virtual Response Handle(const Request& request) = 0;
  // After Server::Wake(): whether a request parked with `after` may be answered now.
  virtual bool Ready(uint64_t after);
  // The answer to a request parked with `after`: once Ready, at its wait_s, or when the server
  // stops. Called exactly once for every park.
  virtual Response EndPark(uint64_t after);
};

// The transport's connections, as the daemons' /v1/status report them.
struct ConnectionCounters {
  int open = 0;
  int idle = 0;  // between requests, or answered and closing: closed first at a cap
  uint64_t accepted = 0;
  uint64_t refused = 0;    // at a cap with nothing idle to close: 503
  uint64_t evicted = 0;    // idle connections closed to make room
  uint64_t timed_out = 0;  // a header, body, write or idle deadline passed
  uint64_t requests = 0;
  uint64_t busy = 0;  // offloaded work refused with 503: the workers' queue was full
};
// As the daemons' /v1/status write them: {"open", "idle", "accepted", ...}.
void to_json(nlohmann::json& j, const ConnectionCounters& c);

}  // namespace headroom::net
