#include "coord/site_feed.h"

#include <chrono>

namespace headroom::coord {

namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point After(double s) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// A batch that ends a view: list again.
WatchResult ListAgain(int64_t revision) { return WatchResult{{}, revision, /*compacted=*/true}; }

}  // namespace

Result<std::vector<WatchResult>> PolledFeed::Changes(int64_t after_revision, int64_t until_revision,
                                                     double) {
  std::vector<WatchResult> out;
  int64_t at = after_revision;
  // A store sends a long history in parts: a few more calls while the caller's own write is
  // still to come.
  for (int part = 0; part < 16; ++part) {
    auto r = store_.Watch(prefix_, /*prefix=*/true, at, 0.0);
    if (!r) {
      if (out.empty()) return std::move(r).error();
      break;
    }
    if (r->events.empty() && !r->compacted) {
      // Quiet: current to the store's revision -- unless that is below the view's (its state
      // lost).
      if (r->revision < at) {
        out.push_back(ListAgain(r->revision));
      } else if (r->revision > at) {
        out.push_back(std::move(*r));
      }
      break;
    }
    const bool compacted = r->compacted;
    at = r->revision;
    out.push_back(std::move(*r));
    if (compacted || at >= until_revision) break;
  }
  return out;
}

FollowedFeed::FollowedFeed(Store& store, std::string prefix, double quiet_s)
    : store_(store), prefix_(std::move(prefix)), quiet_s_(quiet_s) {
  thread_ = std::thread([this] { Run(); });
}

FollowedFeed::~FollowedFeed() { Stop(); }

void FollowedFeed::Stop() {
  {
    MutexLock lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  changed_.notify_all();
  store_.CancelFollows();  // a stream open ends now, not after quiet_s
  if (thread_.joinable()) thread_.join();
}

uint64_t FollowedFeed::streams() const {
  MutexLock lock(mu_);
  return streams_;
}

Result<std::vector<WatchResult>> FollowedFeed::Changes(int64_t after_revision,
                                                       int64_t until_revision, double wait_s) {
  MutexLock lock(mu_);
  if (after_revision != handed_to_) {
    // The view was listed again (or this is the first call): follow from there. A stream of
    // the older generation hands nothing more and ends at its next batch or quiet_s.
    ++generation_;
    batches_.clear();
    error_.reset();
    start_from_ = after_revision;
    handed_to_ = after_revision;
    changed_.notify_all();
  }
  const auto reached = [&]() REQUIRES(mu_) {
    if (stop_ || error_) return true;
    if (batches_.empty()) return handed_to_ >= until_revision;
    return batches_.back().compacted || batches_.back().revision >= until_revision;
  };
  WaitUntil(changed_, mu_, After(wait_s), reached);
  std::vector<WatchResult> out(std::make_move_iterator(batches_.begin()),
                               std::make_move_iterator(batches_.end()));
  batches_.clear();
  if (!out.empty()) handed_to_ = out.back().compacted ? -1 : out.back().revision;
  if (out.empty() && error_) {
    Error e = std::move(*error_);
    error_.reset();
    return e;
  }
  return out;
}

void FollowedFeed::Run() {
  for (;;) {
    int64_t from = 0;
    uint64_t generation = 0;
    {
      MutexLock lock(mu_);
      Wait(changed_, mu_, [this]() REQUIRES(mu_) { return stop_ || start_from_ >= 0; });
      if (stop_) return;
      from = start_from_;
      generation = generation_;
    }
    const std::optional<int64_t> next = FollowOnce(from, generation);
    MutexLock lock(mu_);
    if (stop_) return;
    if (generation != generation_) continue;  // started again: start_from_ says where
    start_from_ = next ? *next : -1;
  }
}

std::optional<int64_t> FollowedFeed::FollowOnce(int64_t from, uint64_t generation) {
  {
    MutexLock lock(mu_);
    ++streams_;
  }
  // Resumes from the last event handed, not from the stream's answer: a stream's creation
  // carries the store's revision before the events up to it have come.
  int64_t last = from;
  bool ended = false;
  const Clock::time_point began = Clock::now();
  auto r = store_.Follow(prefix_, /*prefix=*/true, from, quiet_s_, [&](const WatchResult& b) {
    MutexLock lock(mu_);
    if (stop_ || generation != generation_) return false;
    if (b.events.empty() && !b.compacted) {
      // Created (or quiet): nothing to hand, unless the store's revision is below ours (its
      // state lost, and a watch from a future revision would wait for it in silence).
      if (b.revision >= from) return true;
      batches_.push_back(ListAgain(b.revision));
      ended = true;
    } else {
      batches_.push_back(b);
      ended = b.compacted;
      if (!ended) last = b.revision;
    }
    changed_.notify_all();
    return !ended;
  });
  MutexLock lock(mu_);
  if (ended) return std::nullopt;
  if (!r) {
    if (!stop_ && generation == generation_) error_ = r.error();
    changed_.notify_all();
  }
  // After a failure, or a store whose Follow does not wait: again after quiet_s at the
  // earliest (stopped or started again sooner).
  if (!r || Clock::now() - began < std::chrono::duration<double>(quiet_s_)) {
    WaitUntil(changed_, mu_,
              began + std::chrono::duration_cast<Clock::duration>(
                          std::chrono::duration<double>(quiet_s_)),
              [&]() REQUIRES(mu_) { return stop_ || generation != generation_; });
  }
  return last;
}

}  // namespace headroom::coord
