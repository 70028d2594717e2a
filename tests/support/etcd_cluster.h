// Real etcd processes for tests: a cluster of 1..n members on free loopback ports, each with its
// own temporary data directory and log, killed (SIGKILL) and removed when the object goes, pass
// or fail. Members are started with fork/exec of /usr/bin/etcd (Debian's etcd-server); tests
// skip without it (Available()).
//
// Speaks to members with a few lines of blocking HTTP/1.0 over a socket, not with EtcdStore: the
// helper must not depend on what it is used to test.
//
// Not thread-safe; start, kill and restart from the test's main thread (a member gets SIGKILL
// when the thread that forked it ends).
#pragma once

#include "common/free_port.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../support/spawn.h"

namespace headroom::etcd_test {

inline constexpr const char* kEtcdBinary = "/usr/bin/etcd";

using test_support::Cat;

class EtcdCluster {
 public:
  // How long a member has to answer /health (a leader elected, a read served) after starting.
  static constexpr double kReadyTimeoutS = 15.0;
  static constexpr auto kPollInterval = std::chrono::milliseconds(20);

  struct Reply {
    int status = 0;
    std::string body;
  };

  static bool Available() { return access(kEtcdBinary, X_OK) == 0; }

  // Starts `members` members and waits until each answers; nullopt and *why on failure (with
  // the end of the log of the member that failed).
  // With TLS: each member also listens on https://127.0.0.1:tls_port with these files and
  // --client-cert-auth (the plain port stays, for the test's own health checks and setup).
  struct Tls {
    std::string cert_file, key_file, ca_file;
  };
  static std::optional<EtcdCluster> Start(int members, std::string* why,
                                          std::optional<Tls> tls = std::nullopt) {
    // Free ports are found, released, then bound by etcd: another process may take one in
    // between. Such a clash (etcd cannot bind, or another etcd answers on our port) starts the
    // cluster again on fresh ports; any other failure is the answer.
    for (int attempt = 1;; ++attempt) {
      std::optional<EtcdCluster> cluster = StartOnce(members, why, tls);
      if (cluster || attempt == 3 || !PortClash(*why)) return cluster;
    }
  }

  static bool PortClash(const std::string& why) {
    return why.find("address already in use") != std::string::npos ||
           why.find("answers for another cluster") != std::string::npos;
  }

  static std::optional<EtcdCluster> StartOnce(int members, std::string* why,
                                              const std::optional<Tls>& tls) {
    EtcdCluster cluster;
    cluster.tls_ = tls;
    static int started = 0;
    cluster.token_ =
        Cat("headroom-test-", std::to_string(getpid()), "-", std::to_string(++started));
    std::vector<int> ports = FreePorts(3 * members);
    if (ports.empty()) {
      *why = Cat("cannot find free loopback ports: ", std::strerror(errno));
      return std::nullopt;
    }
    for (int i = 0; i < members; ++i) {
      Member m;
      m.name = Cat("m", std::to_string(i));
      std::string pattern = Cat("/tmp/headroom-etcd-", m.name, "-XXXXXX");
      if (mkdtemp(pattern.data()) == nullptr) {
        *why = Cat("mkdtemp: ", std::strerror(errno));
        return std::nullopt;
      }
      m.dir = pattern;
      m.client_port = ports[2 * i];
      m.peer_port = ports[2 * i + 1];
      m.tls_port = ports[2 * members + i];
      if (i > 0) cluster.initial_cluster_ += ',';
      cluster.initial_cluster_ += Cat(m.name, "=", Url(m.peer_port));
      cluster.members_.push_back(std::move(m));
    }
    // All first, then wait: a member of several has no leader until a quorum runs.
    for (int i = 0; i < members; ++i) {
      if (!cluster.Launch(i, /*existing=*/false, why)) return std::nullopt;
    }
    const auto deadline = Deadline(kReadyTimeoutS);
    for (int i = 0; i < members; ++i) {
      if (!cluster.WaitReady(i, deadline, why)) return std::nullopt;
    }
    return cluster;
  }

  EtcdCluster(EtcdCluster&& other) noexcept
      : token_(std::move(other.token_)),
        initial_cluster_(std::move(other.initial_cluster_)),
        members_(std::move(other.members_)),
        tls_(std::move(other.tls_)) {
    other.members_.clear();
  }
  EtcdCluster& operator=(EtcdCluster&& other) noexcept {
    if (this != &other) {
      Stop();
      token_ = std::move(other.token_);
      initial_cluster_ = std::move(other.initial_cluster_);
      members_ = std::move(other.members_);
      tls_ = std::move(other.tls_);
      other.members_.clear();
    }
    return *this;
  }
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  ~EtcdCluster() { Stop(); }

  int size() const { return static_cast<int>(members_.size()); }
  std::string endpoint(int i) const { return Url(members_[i].client_port); }
  // Every member's client URL, comma-separated, in member order.
  // The members' TLS endpoints, "https://127.0.0.1:P,..." (with Tls).
  std::string tls_endpoints() const {
    std::string out;
    for (int i = 0; i < size(); ++i) {
      if (i > 0) out += ',';
      out += Cat("https://127.0.0.1:", std::to_string(members_[i].tls_port));
    }
    return out;
  }
  std::string endpoints() const {
    std::string out;
    for (int i = 0; i < size(); ++i) {
      if (i > 0) out += ',';
      out += endpoint(i);
    }
    return out;
  }
  bool running(int i) const { return members_[i].pid > 0; }
  // Member i's process (for its CPU and memory in /proc); -1 while it is not running.
  pid_t pid(int i) const { return members_[i].pid; }

  // SIGKILL, and waits for it to be gone (its sockets closed).
  void Kill(int i) {
    Member& m = members_[i];
    if (m.pid <= 0) return;
    kill(m.pid, SIGKILL);
    while (waitpid(m.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    m.pid = -1;
  }

  // Starts a killed member again on its data directory and waits until it answers.
  bool Restart(int i, std::string* why) {
    Kill(i);
    return Launch(i, /*existing=*/true, why) && WaitReady(i, Deadline(kReadyTimeoutS), why);
  }

  // Every member killed, its data removed, and the cluster started again empty under a new
  // token on the same ports (etcd's state lost: the revision back at 1, no keys, no leases).
  bool Wipe(std::string* why) {
    for (int i = 0; i < size(); ++i) Kill(i);
    for (const Member& m : members_) {
      std::error_code ignored;
      std::filesystem::remove_all(m.dir + "/data", ignored);
    }
    token_ += "-wiped";
    for (int i = 0; i < size(); ++i) {
      if (!Launch(i, /*existing=*/false, why)) return false;
    }
    for (int i = 0; i < size(); ++i) {
      if (!WaitReady(i, Deadline(kReadyTimeoutS), why)) return false;
    }
    return true;
  }

  // The member that is the leader, as the running members report it; -1 when none says so.
  int LeaderIndex() const {
    for (int i = 0; i < size(); ++i) {
      if (!running(i)) continue;
      const std::optional<Reply> r = Post(i, "/v3/maintenance/status", "{}");
      if (!r || r->status != 200) continue;
      const nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
      if (!j.is_object() || !j.contains("leader") || !j.contains("header")) continue;
      const nlohmann::json& header = j["header"];
      if (header.is_object() && header.contains("member_id") &&
          header["member_id"] == j["leader"]) {
        return i;
      }
    }
    return -1;
  }

  // POSTs JSON to member i's gateway (e.g. /v3/kv/compaction); nullopt when it does not answer.
  std::optional<Reply> Post(int i, const std::string& path, const std::string& body,
                            double timeout_s = 2.0) const {
    return Http(members_[i].client_port, "POST", path, body, timeout_s);
  }

  // Turns etcd's auth on: a root user, and `user` with `password` allowed read-write on the
  // keys [key, range_end) only (both base64, as the gateway takes them). Empty on success, else
  // what failed.
  std::string EnableAuth(const std::string& user, const std::string& password,
                         const std::string& key_b64, const std::string& range_end_b64) const {
    const std::vector<std::pair<std::string, std::string>> steps = {
        {"/v3/auth/role/add", R"({"name":"root"})"},
        {"/v3/auth/user/add", R"({"name":"root","password":"rootpw"})"},
        {"/v3/auth/user/grant", R"({"user":"root","role":"root"})"},
        {"/v3/auth/role/add", Cat(R"({"name":")", user, R"("})")},
        {"/v3/auth/role/grant",
         Cat(R"({"name":")", user, R"(","perm":{"permType":"READWRITE",)", R"("key":")", key_b64,
             R"(","range_end":")", range_end_b64, R"("}})")},
        {"/v3/auth/user/add", Cat(R"({"name":")", user, R"(","password":")", password, R"("})")},
        {"/v3/auth/user/grant", Cat(R"({"user":")", user, R"(","role":")", user, R"("})")},
        {"/v3/auth/enable", "{}"}};
    for (const auto& [path, body] : steps) {
      const std::optional<Reply> r = Post(0, path, body);
      if (!r || r->status != 200) return Cat(path, ": ", r ? r->body : std::string("no answer"));
    }
    return {};
  }

  // The end of member i's log, for failure messages.
  std::string LogTail(int i, size_t bytes = 2000) const {
    std::ifstream in(members_[i].dir + "/etcd.log");
    std::stringstream all;
    all << in.rdbuf();
    const std::string text = all.str();
    return text.size() > bytes ? text.substr(text.size() - bytes) : text;
  }

 private:
  struct Member {
    std::string name;
    std::string dir;  // the data directory is dir/data, the log dir/etcd.log
    int client_port = 0;
    int peer_port = 0;
    int tls_port = 0;  // with Tls
    pid_t pid = -1;
  };

  EtcdCluster() = default;

  // Kills every member and removes its directory.
  void Stop() {
    for (size_t i = 0; i < members_.size(); ++i) Kill(static_cast<int>(i));
    for (const Member& m : members_) {
      std::error_code ignored;
      std::filesystem::remove_all(m.dir, ignored);
    }
    members_.clear();
  }

  static std::string Url(int port) { return Cat("http://127.0.0.1:", std::to_string(port)); }
  static std::chrono::steady_clock::time_point Deadline(double s) {
    return std::chrono::steady_clock::now() +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(
               std::chrono::duration<double>(s));
  }

  // Ports the kernel hands out for port 0, all bound at once so they differ (empty: none).
  static std::vector<int> FreePorts(int n) {
    auto ports = headroom::FreeLoopbackPorts(n);
    return ports ? *ports : std::vector<int>{};
  }

  bool Launch(int i, bool existing, std::string* why) {
    const Member& m = members_[i];
    const std::string client_urls =
        tls_ ? Cat(Url(m.client_port), ",https://127.0.0.1:", std::to_string(m.tls_port))
             : Url(m.client_port);
    std::vector<std::string> args = {
        kEtcdBinary,
        Cat("--name=", m.name),
        Cat("--data-dir=", m.dir, "/data"),
        Cat("--listen-client-urls=", client_urls),
        Cat("--advertise-client-urls=", client_urls),
        Cat("--listen-peer-urls=", Url(m.peer_port)),
        Cat("--initial-advertise-peer-urls=", Url(m.peer_port)),
        Cat("--initial-cluster=", initial_cluster_),
        Cat("--initial-cluster-state=", existing ? "existing" : "new"),
        Cat("--initial-cluster-token=", token_),
        "--heartbeat-interval=100",
        "--election-timeout=1000",
        "--logger=zap",
        "--log-outputs=stderr",
    };
    if (tls_) {
      args.push_back(Cat("--cert-file=", tls_->cert_file));
      args.push_back(Cat("--key-file=", tls_->key_file));
      args.push_back(Cat("--trusted-ca-file=", tls_->ca_file));
      args.push_back("--client-cert-auth");
    }
    const pid_t pid = test_support::SpawnLogged(kEtcdBinary, args, m.dir + "/etcd.log", why);
    if (pid < 0) return false;
    members_[i].pid = pid;
    return true;
  }

  bool WaitReady(int i, std::chrono::steady_clock::time_point deadline, std::string* why) {
    while (std::chrono::steady_clock::now() < deadline) {
      int wstatus = 0;
      if (waitpid(members_[i].pid, &wstatus, WNOHANG) == members_[i].pid) {
        members_[i].pid = -1;
        *why = Cat("etcd ", members_[i].name, " exited; its log ends:\n", LogTail(i));
        return false;
      }
      const std::optional<Reply> r =
          Http(members_[i].client_port, "GET", "/health", "", /*timeout_s=*/1.0);
      if (r && r->status == 200 && r->body.find("\"true\"") != std::string::npos) {
        // Healthy, but whose? Ours lists our member's peer URL (unique to this cluster);
        // another test's etcd on a port we were handed does not.
        const std::optional<Reply> list = Http(members_[i].client_port, "POST",
                                               "/v3/cluster/member/list", "{}", /*timeout_s=*/1.0);
        // (With auth on, the list needs a user: then it cannot tell, and the health answers.)
        if (list && list->status == 200 &&
            list->body.find(Url(members_[i].peer_port)) == std::string::npos) {
          *why = Cat("etcd ", members_[i].name, ": port ", std::to_string(members_[i].client_port),
                     " answers for another cluster (a port clash)");
          return false;
        }
        return true;
      }
      std::this_thread::sleep_for(kPollInterval);
    }
    *why = Cat("etcd ", members_[i].name, " not healthy within ", std::to_string(kReadyTimeoutS),
               " s; its log ends:\n", LogTail(i));
    return false;
  }

  // One HTTP/1.0 exchange (no chunking, the server closes): nullopt when nothing answers.
  static std::optional<Reply> Http(int port, const std::string& method, const std::string& path,
                                   const std::string& body, double timeout_s) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return std::nullopt;
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(timeout_s);
    tv.tv_usec = static_cast<suseconds_t>((timeout_s - static_cast<double>(tv.tv_sec)) * 1e6);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      return std::nullopt;
    }
    const std::string request =
        Cat(method, " ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n",
            "Content-Length: ", std::to_string(body.size()), "\r\n\r\n", body);
    for (size_t sent = 0; sent < request.size();) {
      const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        close(fd);
        return std::nullopt;
      }
      sent += static_cast<size_t>(n);
    }
    std::string response;
    char buffer[4096];
    while (true) {
      const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        close(fd);
        return std::nullopt;
      }
      if (n == 0) break;
      response.append(buffer, static_cast<size_t>(n));
    }
    close(fd);
    const size_t head_end = response.find("\r\n\r\n");
    const size_t space = response.find(' ');
    if (head_end == std::string::npos || space == std::string::npos) return std::nullopt;
    Reply reply;
    reply.status = std::atoi(response.c_str() + space + 1);
    reply.body = response.substr(head_end + 4);
    return reply;
  }

  std::string token_;            // unique per cluster, so members of two never join
  std::string initial_cluster_;  // "m0=http://127.0.0.1:P,..."
  std::vector<Member> members_;
  std::optional<Tls> tls_;
};

}  // namespace headroom::etcd_test
