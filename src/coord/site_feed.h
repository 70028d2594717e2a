// Where the leader's view of its site (site_view.h) gets its changes (issue 55, item 1): the
// batches of a watch of the site's prefix after the view's revision, in order.
//   - PolledFeed: one Store::Watch per call, for a store whose Watch answers at once with every
//     change after the revision (MemoryStore: fleet-sim and unit tests).
//   - FollowedFeed: one watch stream that stays open (Store::Follow) on a thread of its own, so
//     the changes are in memory as they commit (etcd: the coordinator's daemon). A watch opened
//     from a past revision would be served by etcd's catch-up loop, up to 100 ms later; an
//     open one is told of each commit at once.
// Either way the feed only saves the whole-prefix read: a feed that fails or falls behind
// leaves the leader to list the prefix again (coordinator.cc, ReadView), and the ledger's
// transaction compares the ledger's mod_revision, so a view behind the store never writes.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"
#include "coord/store.h"

namespace headroom::coord {

class SiteFeed {
 public:
  virtual ~SiteFeed() = default;
  // The batches that continue a view at `after_revision`, in order, as far as they have come:
  // waits up to `wait_s` for them to reach `until_revision` (a revision the caller wrote under
  // the prefix itself: its event will come). A feed that was following from elsewhere (the
  // view was listed again) starts again from `after_revision`. A compacted batch (the history
  // gone, or the store's revision gone back) ends what it returns: list again.
  virtual Result<std::vector<WatchResult>> Changes(int64_t after_revision, int64_t until_revision,
                                                   double wait_s) = 0;
};

class PolledFeed : public SiteFeed {
 public:
  PolledFeed(Store& store, std::string prefix) : store_(store), prefix_(std::move(prefix)) {}
  Result<std::vector<WatchResult>> Changes(int64_t after_revision, int64_t until_revision,
                                           double wait_s) override;

 private:
  Store& store_;
  const std::string prefix_;
};

// Thread-safe. `store` outlives the feed and is safe to call from its thread; its Follow must
// wait (a store whose Follow returns at once when quiet is polled every `quiet_s` instead).
class FollowedFeed : public SiteFeed {
 public:
  // `quiet_s`: a stream with nothing for this long is opened again (from where it was).
  FollowedFeed(Store& store, std::string prefix, double quiet_s);
  ~FollowedFeed() override;  // Stop
  FollowedFeed(const FollowedFeed&) = delete;
  FollowedFeed& operator=(const FollowedFeed&) = delete;

  Result<std::vector<WatchResult>> Changes(int64_t after_revision, int64_t until_revision,
                                           double wait_s) override EXCLUDES(mu_);
  // Ends the thread (a stream open is ended by the store's CancelFollows) and joins it.
  void Stop() EXCLUDES(mu_);
  uint64_t streams() const EXCLUDES(mu_);  // Store::Follow calls made

 private:
  void Run() EXCLUDES(mu_);
  // One stream from `from`; what to follow from next (nullopt: wait for the next Changes).
  std::optional<int64_t> FollowOnce(int64_t from, uint64_t generation) EXCLUDES(mu_);

  Store& store_;
  const std::string prefix_;
  const double quiet_s_;
  mutable Mutex mu_;
  std::condition_variable_any changed_;
  bool stop_ GUARDED_BY(mu_) = false;
  // Where the consumer's view is (after what it was handed): a Changes from elsewhere starts
  // the stream again (a new generation; batches of an older one are dropped).
  int64_t handed_to_ GUARDED_BY(mu_) = -1;
  uint64_t generation_ GUARDED_BY(mu_) = 0;
  int64_t start_from_ GUARDED_BY(mu_) = -1;  // -1: nothing to follow
  std::deque<WatchResult> batches_ GUARDED_BY(mu_);
  std::optional<Error> error_ GUARDED_BY(mu_);  // the last stream's failure, told once
  uint64_t streams_ GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace headroom::coord
