// The leader's view of its site (issue 55, item 1): the site's prefix kept in memory from one
// list and the changes after it, as a watch brings them, instead of the whole prefix read every
// period. The view answers as a read of the prefix at its revision would (Snapshot), so the
// period plans on it as on a read; the ledger's transaction keeps its compare on the ledger's
// mod_revision, so a view behind the store can never write.
//
// Rules (what Apply accepts):
//   - Reset(list): the view is the list, at the list's revision.
//   - Apply(changes): a batch of a watch that began after revision(): its events in revision
//     order; an event at or below revision() is one the view holds already (a watch resumed
//     from an earlier point sends it again) and is skipped. Afterwards the view is at the
//     batch's revision (its last event's, or the store's when it had none: a quiet view is
//     current to there).
//     etcd splits a long history between responses on revision boundaries only (its
//     watchBatchMaxRevs counts revisions), so a batch never ends inside a transaction's events.
//   - A compacted batch, one that goes back (its revision below the view's) or any batch before
//     a Reset: false, and the view is not listed any more: list again (Reset) before using it.
// Pure: no store, no clock. Not thread-safe: one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "coord/store.h"

namespace headroom::coord {

class SiteView {
 public:
  void Reset(const RangeResult& list);
  // Whether the view is current after the batch (else: list again).
  bool Apply(const WatchResult& changes);
  // The view as a read of the prefix at revision(): every key, sorted. REQUIRES: listed().
  RangeResult Snapshot() const;
  // The same, without a copy: valid until the next Reset or Apply.
  const std::map<std::string, KeyValue>& kvs() const { return kvs_; }
  bool listed() const { return listed_; }
  int64_t revision() const { return revision_; }
  size_t size() const { return kvs_.size(); }

 private:
  bool listed_ = false;
  int64_t revision_ = 0;
  std::map<std::string, KeyValue> kvs_;
};

}  // namespace headroom::coord
