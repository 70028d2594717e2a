#include "coord/lease.h"

#include <fmt/format.h>

#include <algorithm>

namespace headroom::coord {

Lease::Lease(Store& store, int64_t ttl_s, double renew_after_s)
    : store_(&store),
      asked_ttl_s_(ttl_s),
      renew_after_s_(renew_after_s > 0.0 ? renew_after_s : static_cast<double>(ttl_s) / 3.0),
      ttl_s_(ttl_s) {}

Status Lease::Grant(double sent_s) {
  id_ = 0;
  auto granted = store_->LeaseGrant(asked_ttl_s_);
  if (!granted) return std::move(granted).error();
  id_ = *granted;
  ttl_s_ = asked_ttl_s_;
  renewed_s_ = sent_s;
  return OkStatus();
}

void Lease::Adopt(LeaseId id, double renewed_s) {
  id_ = id;
  ttl_s_ = asked_ttl_s_;
  renewed_s_ = renewed_s;
}

bool Lease::Due(double now_s) const { return held() && now_s - renewed_s_ >= renew_after_s_; }

Status Lease::Renew(double sent_s) {
  if (!held()) return Error::NotFound(fmt::format("no lease held: {}", kLeaseGone));
  auto kept = store_->LeaseKeepAlive(id_);
  if (!kept) {
    if (IsLeaseGone(kept.error())) id_ = 0;
    return std::move(kept).error();
  }
  renewed_s_ = sent_s;
  if (*kept > 0) ttl_s_ = asked_ttl_s_ > 0 ? std::min(*kept, asked_ttl_s_) : *kept;
  return OkStatus();
}

Status Lease::Revoke() {
  if (!held()) return OkStatus();
  const LeaseId id = id_;
  id_ = 0;
  return store_->LeaseRevoke(id);
}

}  // namespace headroom::coord
