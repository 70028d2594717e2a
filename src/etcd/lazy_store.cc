#include "etcd/lazy_store.h"

#include <fmt/format.h>

namespace headroom::etcd {

LazyStore::LazyStore(std::string endpoints, EtcdCredentials credentials, EtcdTls tls,
                     EtcdKeepAlive keepalive)
    : coord::ForwardingStore(nullptr),
      endpoints_(std::move(endpoints)),
      credentials_(std::move(credentials)),
      tls_(std::move(tls)),
      keepalive_(keepalive) {}

void LazyStore::CancelFollows() {
  MutexLock lock(mu_);
  canceled_ = true;
  if (store_) store_->CancelFollows();
}

Result<coord::Store*> LazyStore::Target() {
  MutexLock lock(mu_);
  if (store_) return static_cast<coord::Store*>(store_.get());
  if (canceled_) return Error::Io(fmt::format("etcd at {}: stopping", endpoints_));
  auto opened = EtcdStore::Open(endpoints_, 2.0, credentials_, tls_, keepalive_);
  if (!opened) return std::move(opened).error();
  store_ = std::move(*opened);
  return static_cast<coord::Store*>(store_.get());
}

}  // namespace headroom::etcd
