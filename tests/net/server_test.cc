// net::Server over real loopback sockets (the TSan build runs these): framing refused on the
// wire, offloaded work that holds up no other client and a full queue answered 503 at once,
// parked requests answered on Wake, at their timeout and at Stop. Every wait is on a condition
// (a gate, a counter), none on a sleep.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "net/router.h"
#include "net/server.h"

namespace headroom::net {
namespace {

using ::testing::HasSubstr;

constexpr int kClientTimeoutS = 10;  // a client that would wait longer: the test fails

struct Answer {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  bool closed_after = false;  // the server closed the connection after answering
};

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{kClientTimeoutS, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Reads one response from `fd`; nullopt when the connection ends (or times out) first.
std::optional<Answer> ReadAnswer(int fd) {
  std::string data;
  char buf[4096];
  size_t head_end = std::string::npos;
  while ((head_end = data.find("\r\n\r\n")) == std::string::npos) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return std::nullopt;
    data.append(buf, static_cast<size_t>(n));
  }
  Answer a;
  const std::string head = data.substr(0, head_end);
  a.status = std::stoi(head.substr(9, 3));
  size_t line = head.find("\r\n");
  while (line != std::string::npos) {
    const size_t next = head.find("\r\n", line + 2);
    const std::string field = head.substr(line + 2, next - line - 2);
    const size_t colon = field.find(':');
    std::string name = field.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    a.headers[name] = field.substr(colon + 2);
    line = next;
  }
  a.body = data.substr(head_end + 4);
  const size_t length = std::stoul(a.headers["content-length"]);
  while (a.body.size() < length) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return std::nullopt;
    a.body.append(buf, static_cast<size_t>(n));
  }
  return a;
}

// Sends `bytes` on a new connection and reads one answer; then whether the server closes.
std::optional<Answer> Exchange(int port, const std::string& bytes) {
  const int fd = Connect(port);
  if (fd < 0) return std::nullopt;
  send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  std::optional<Answer> a = ReadAnswer(fd);
  if (a) {
    char c;
    a->closed_after = recv(fd, &c, 1, 0) == 0;
  }
  close(fd);
  return a;
}

std::string Get(std::string_view path, std::string_view extra = "") {
  return "GET " + std::string(path) + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + std::string(extra) +
         "Connection: close\r\n\r\n";
}

// Work that waits for the test to open the gate, counting who entered.
struct Gate {
  void Enter() {
    std::unique_lock lock(mu);
    ++entered;
    cv.notify_all();
    cv.wait(lock, [this] { return open; });
  }
  void WaitEntered(int n) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return entered >= n; });
  }
  void Open() {
    std::lock_guard lock(mu);
    open = true;
    cv.notify_all();
  }
  std::mutex mu;
  std::condition_variable cv;
  int entered = 0;
  bool open = false;
};

// /fast answers at once, /slow offloads work that waits on the gate, /park parks (wait_s from
// the query, in ms) until Ready or its timeout. Handle, Ready and EndPark run on the loop.
class TestHandler final : public Handler {
 public:
  Response Handle(const Request& request) override {
    ++handled;
    const std::string_view target = request.target;
    if (target == "/fast") return JsonResponse(200, "{\"fast\": true}\n");
    if (target == "/slow") {
      Response r;
      r.offload = [this] {
        gate.Enter();
        return JsonResponse(200, "{\"slow\": true}\n");
      };
      return r;
    }
    if (target == "/bulk") {
      Response r;
      r.lane = Lane::kBulk;
      r.offload = [this] {
        bulk_nice = getpriority(PRIO_PROCESS, static_cast<id_t>(gettid()));
        bulk_gate.Enter();
        Response answer = JsonResponse(200, "{\"bulk\": true}\n");
        answer.hold = std::shared_ptr<const void>(nullptr, [this](const void*) { ++released; });
        return answer;
      };
      return r;
    }
    if (target.starts_with("/park?ms=")) {
      Response r;
      r.park = Park{++parks, std::stod(std::string(target.substr(9))) / 1000.0};
      return r;
    }
    return ErrorResponse(404, "no such path");
  }
  bool Ready(uint64_t after) override { return after <= ready_up_to.load(); }
  Response EndPark(uint64_t after) override {
    ++ended;
    return JsonResponse(200, "{\"parked\": " + std::to_string(after) + "}\n");
  }

  Gate gate;
  Gate bulk_gate;
  std::atomic<int> bulk_nice{-100};
  std::atomic<int> released{0};  // answers' holds let go
  std::atomic<int> handled{0};
  std::atomic<uint64_t> parks{0};
  std::atomic<uint64_t> ready_up_to{0};
  std::atomic<int> ended{0};
};

template <class F>
void WaitFor(F condition) {
  while (!condition()) std::this_thread::yield();
}

TEST(NetServer, AmbiguousFramingIs400AndTheConnectionCloses) {
  TestHandler handler;
  Server server({}, "test");
  ASSERT_TRUE(server.Start("127.0.0.1", 0, handler).ok());
  const std::string post = "POST /fast HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {post + "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}", "Content-Length: repeated"},
      {post + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}x", "Content-Length"},
      {"GET /fast HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.test\r\n\r\n", "Host: repeated"},
      {"GET /fast HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Nul: a" + std::string(1, '\0') + "\r\n\r\n",
       "malformed"},
      {post + "Transfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
       "malformed"},
      {post + "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
       "malformed"},
      {post + "Transfer-Encoding: gzip\r\n\r\n{}", "Transfer-Encoding"},
  };
  for (const auto& [bytes, says] : bad) {
    const std::optional<Answer> a = Exchange(server.port(), bytes);
    ASSERT_TRUE(a) << testing::PrintToString(bytes);
    EXPECT_EQ(a->status, 400) << testing::PrintToString(bytes);
    EXPECT_THAT(a->body, HasSubstr(says));
    EXPECT_EQ(a->headers.at("connection"), "close");
    EXPECT_TRUE(a->closed_after);
  }
  EXPECT_EQ(handler.handled.load(), 0);
  const std::optional<Answer> good = Exchange(server.port(), Get("/fast"));
  ASSERT_TRUE(good);
  EXPECT_EQ(good->status, 200);
  EXPECT_EQ(good->headers.at("cache-control"), "no-store");
  EXPECT_EQ(handler.handled.load(), 1);
}

TEST(NetServer, OffloadedWorkHoldsUpNoOneAndAFullQueueIs503AtOnce) {
  TestHandler handler;
  ServerLimits limits;
  limits.worker_threads = 1;
  limits.max_queued_work = 1;
  Server server(limits, "test");
  ASSERT_TRUE(server.Start("127.0.0.1", 0, handler).ok());
  std::optional<Answer> first, second;
  std::thread a([&] { first = Exchange(server.port(), Get("/slow")); });
  handler.gate.WaitEntered(1);  // the worker is busy with the first
  // The loop is not: another client is answered while the work waits.
  for (int i = 0; i < 10; ++i) {
    const std::optional<Answer> fast = Exchange(server.port(), Get("/fast"));
    ASSERT_TRUE(fast);
    EXPECT_EQ(fast->status, 200);
  }
  std::thread b([&] { second = Exchange(server.port(), Get("/slow")); });
  // Dispatched: the second waits in the queue (the loop handles one request at a time, so the
  // third below comes after it is queued).
  WaitFor([&] { return server.counters().requests == 12; });
  const std::optional<Answer> third = Exchange(server.port(), Get("/slow"));
  ASSERT_TRUE(third);
  EXPECT_EQ(third->status, 503);
  EXPECT_EQ(third->headers.at("retry-after"), "1");
  EXPECT_THAT(third->body, HasSubstr("busy"));
  EXPECT_EQ(server.counters().busy, 1u);
  handler.gate.Open();
  a.join();
  b.join();
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(first->body, "{\"slow\": true}\n");
  EXPECT_EQ(second->status, 200);
}

// Issue 53: long CPU work (a coordinator's history) runs on a lane of its own at a lower
// priority: while it is busy the store's workers and the loop answer, its queue is bounded
// (503 beyond), and what an answer holds is let go once it is written.
TEST(NetServer, BulkWorkHasALaneOfItsOwnAndLetsGoOfItsAnswers) {
  TestHandler handler;
  ServerLimits limits;
  limits.worker_threads = 1;
  limits.bulk_threads = 1;
  limits.max_queued_bulk = 1;
  limits.bulk_nice = 7;
  Server server(limits, "test");
  ASSERT_TRUE(server.Start("127.0.0.1", 0, handler).ok());
  std::optional<Answer> first, second;
  std::thread a([&] { first = Exchange(server.port(), Get("/bulk")); });
  handler.bulk_gate.WaitEntered(1);  // the bulk lane is busy
  EXPECT_EQ(handler.bulk_nice.load(), getpriority(PRIO_PROCESS, 0) + 7);
  handler.gate.Open();  // the store's work runs at once
  for (int i = 0; i < 5; ++i) {
    const std::optional<Answer> slow = Exchange(server.port(), Get("/slow"));
    ASSERT_TRUE(slow);
    EXPECT_EQ(slow->status, 200);
    const std::optional<Answer> fast = Exchange(server.port(), Get("/fast"));
    ASSERT_TRUE(fast);
    EXPECT_EQ(fast->status, 200);
  }
  std::thread b([&] { second = Exchange(server.port(), Get("/bulk")); });
  WaitFor([&] { return server.counters().requests == 12; });  // the second is queued
  const std::optional<Answer> third = Exchange(server.port(), Get("/bulk"));
  ASSERT_TRUE(third);
  EXPECT_EQ(third->status, 503);
  EXPECT_THAT(third->body, HasSubstr("busy"));
  EXPECT_EQ(handler.released.load(), 0);
  handler.bulk_gate.Open();
  a.join();
  b.join();
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->body, "{\"bulk\": true}\n");
  EXPECT_EQ(second->status, 200);
  WaitFor([&] { return handler.released.load() == 2; });
}

TEST(NetServer, ParkedRequestsAnswerOnWakeAtTheirTimeoutAndAtStop) {
  TestHandler handler;
  Server server({}, "test");
  ASSERT_TRUE(server.Start("127.0.0.1", 0, handler).ok());
  std::optional<Answer> woken;
  std::thread waiter([&] { woken = Exchange(server.port(), Get("/park?ms=30000")); });
  WaitFor([&] { return handler.parks.load() == 1; });
  server.Wake();  // not ready yet: still parked
  const std::optional<Answer> timed = Exchange(server.port(), Get("/park?ms=1"));
  ASSERT_TRUE(timed);  // its own timeout
  EXPECT_EQ(timed->body, "{\"parked\": 2}\n");
  EXPECT_EQ(handler.ended.load(), 1);
  handler.ready_up_to = 1;
  server.Wake();
  waiter.join();
  ASSERT_TRUE(woken);
  EXPECT_EQ(woken->body, "{\"parked\": 1}\n");
  // Parked at Stop: answered (or closed), EndPark called once for every park.
  const int fd = Connect(server.port());
  const std::string parked = Get("/park?ms=30000");
  send(fd, parked.data(), parked.size(), MSG_NOSIGNAL);
  WaitFor([&] { return handler.parks.load() == 3; });
  server.Stop();
  char c;
  while (recv(fd, &c, 1, 0) > 0) {
  }
  close(fd);
  EXPECT_EQ(handler.ended.load(), 3);
}

TEST(NetServer, ASecondServerOnAPortInUseFailsNamingIt) {
  TestHandler handler;
  Server first({}, "test");
  ASSERT_TRUE(first.Start("127.0.0.1", 0, handler).ok());
  Server second({}, "test");
  const Status st = second.Bind("127.0.0.1", first.port());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message(),
            "test: cannot listen on 127.0.0.1:" + std::to_string(first.port()) +
                ": the port is in use (another test?)");
  const std::optional<Answer> a = Exchange(first.port(), Get("/fast"));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, 200);
}

}  // namespace
}  // namespace headroom::net
