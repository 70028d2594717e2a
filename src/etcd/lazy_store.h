#pragma once
// A site's etcd, opened on first use and again after a failure to open: an agent whose etcd is
// unreachable at start runs on its local budget and keeps trying (docs/SITE.md). Once open, it
// stays; CancelFollows makes every later open fail (a clean stop).
#include <memory>
#include <string>

#include "common/thread_annotations.h"
#include "coord/forwarding_store.h"
#include "etcd/etcd_store.h"

namespace headroom::etcd {

class LazyStore final : public coord::ForwardingStore {
 public:
  LazyStore(std::string endpoints, EtcdCredentials credentials, EtcdTls tls,
            EtcdKeepAlive keepalive = kDefaultEtcdKeepAlive);
  void CancelFollows() override EXCLUDES(mu_);
  bool WatchWaits() const override { return true; }  // an etcd's, once open
  std::string Describe() const override { return endpoints_; }

 protected:
  Result<coord::Store*> Target() override EXCLUDES(mu_);

 private:
  const std::string endpoints_;
  const EtcdCredentials credentials_;
  const EtcdTls tls_;
  const EtcdKeepAlive keepalive_;
  Mutex mu_;
  std::unique_ptr<EtcdStore> store_ GUARDED_BY(mu_);
  bool canceled_ GUARDED_BY(mu_) = false;
};

}  // namespace headroom::etcd
