#include "coord/site_view.h"

namespace headroom::coord {

void SiteView::Reset(const RangeResult& list) {
  kvs_.clear();
  for (const KeyValue& kv : list.kvs) kvs_[kv.key] = kv;
  revision_ = list.revision;
  listed_ = true;
}

bool SiteView::Apply(const WatchResult& changes) {
  if (!listed_ || changes.compacted || changes.revision < revision_) {
    listed_ = false;
    return false;
  }
  for (const WatchEvent& e : changes.events) {
    if (e.kv.mod_revision <= revision_) continue;  // held already
    if (e.type == WatchEvent::Type::kPut) {
      kvs_[e.kv.key] = e.kv;
    } else {
      kvs_.erase(e.kv.key);
    }
  }
  revision_ = changes.revision;
  return true;
}

RangeResult SiteView::Snapshot() const {
  RangeResult out;
  out.revision = revision_;
  out.kvs.reserve(kvs_.size());
  for (const auto& [key, kv] : kvs_) out.kvs.push_back(kv);
  return out;
}

}  // namespace headroom::coord
