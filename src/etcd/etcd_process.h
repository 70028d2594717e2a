#pragma once
// A single-member etcd of one's own (`headroom diloco local`): Debian's /usr/bin/etcd on free
// loopback ports, its data in a temporary directory; stopped by PID (SIGKILL) and its directory
// removed when the object goes.
#include <sys/types.h>

#include <memory>
#include <string>

#include "common/error.h"

namespace headroom::etcd {

class EtcdProcess {
 public:
  // Starts etcd and waits (up to ready_timeout_s) until it answers /health.
  static Result<std::unique_ptr<EtcdProcess>> Start(double ready_timeout_s = 15.0,
                                                    const std::string& binary = "/usr/bin/etcd");
  ~EtcdProcess();
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  const std::string& url() const { return url_; }  // "http://127.0.0.1:PORT"
  pid_t pid() const { return pid_; }

 private:
  EtcdProcess() = default;
  pid_t pid_ = -1;
  std::string dir_;
  std::string url_;
};

}  // namespace headroom::etcd
