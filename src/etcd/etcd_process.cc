#include "etcd/etcd_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "common/free_port.h"
#include "etcd/etcd_store.h"

namespace headroom::etcd {

Result<std::unique_ptr<EtcdProcess>> EtcdProcess::Start(double ready_timeout_s,
                                                        const std::string& binary) {
  if (access(binary.c_str(), X_OK) != 0) {
    return Error::Io(binary + ": not found (Debian's etcd-server; scripts/setup.sh installs it)");
  }
  auto ports = FreeLoopbackPorts(2);  // client and peer, distinct
  if (!ports) return std::move(ports).error();
  const int client_port = (*ports)[0];
  const int peer_port = (*ports)[1];
  std::string tmpl = (std::filesystem::temp_directory_path() / "headroom-etcd-XXXXXX").string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr)
    return Error::Io(std::string("mkdtemp: ") + std::strerror(errno));
  std::unique_ptr<EtcdProcess> p(new EtcdProcess());
  p->dir_ = buf.data();
  p->url_ = "http://127.0.0.1:" + std::to_string(client_port);
  const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer_port);
  std::vector<std::string> args = {binary,
                                   "--name=local",
                                   "--data-dir=" + p->dir_ + "/data",
                                   "--listen-client-urls=" + p->url_,
                                   "--advertise-client-urls=" + p->url_,
                                   "--listen-peer-urls=" + peer_url,
                                   "--initial-advertise-peer-urls=" + peer_url,
                                   "--initial-cluster=local=" + peer_url,
                                   "--logger=zap",
                                   "--log-outputs=stderr"};
  const std::string log = p->dir_ + "/etcd.log";
  const pid_t pid = fork();
  if (pid < 0) return Error::Io(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  p->pid_ = pid;
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<long>(ready_timeout_s * 1000));
  while (true) {
    auto store = etcd::EtcdStore::Open(p->url_, 0.5);
    if (store && (*store)->Get("/health-check")) return p;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      p->pid_ = -1;
      return Error::Io("etcd exited at start (log: " + log + ")");
    }
    if (std::chrono::steady_clock::now() > until) {
      return Error::Io("etcd did not answer within " + std::to_string(ready_timeout_s) +
                       " s (log: " + log + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

EtcdProcess::~EtcdProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

}  // namespace headroom::etcd
