// Streaming DiLoCo's members of the worker (stream.h; docs/DILOCO.md, "Streaming").
#include <algorithm>
#include <span>

#include "diloco/worker_impl.h"

namespace headroom::diloco::internal {

// My error feedback's slice for `slice`, the exchange, the slice written back.
Result<std::optional<Aggregate>> Worker::ExchangeSlice(Communicator& c, const ExchangeSpec& spec,
                                                       const std::vector<float>& delta,
                                                       Fragment slice, std::string* why) {
  if (error_.size() != global_.size()) error_.assign(global_.size(), 0.0f);
  std::vector<float> error(error_.begin() + static_cast<std::ptrdiff_t>(slice.begin),
                           error_.begin() + static_cast<std::ptrdiff_t>(slice.end));
  auto agg = Exchange(c, spec, delta, error, why);
  std::copy(error.begin(), error.end(), error_.begin() + static_cast<std::ptrdiff_t>(slice.begin));
  return agg;
}

// H inner steps; streaming: each fragment but the last sent on the last round's group when its
// step comes, and applied when the next one's does (or at the round's end).
Status Worker::TrainRound(int round) {
  const int n = o_.stream_fragments;
  const int h = o_.inner_steps;
  if (n <= 1) return TrainInner(h);
  int done = 0;
  for (int f = 0; f + 1 < n; ++f) {
    const int at = FragmentStep(f, n, h);
    if (auto s = TrainInner(at - done); !s) return s;
    done = at;
    if (auto s = ApplyFragment(); !s) return s;
    SendFragment(round, f);
  }
  if (auto s = TrainInner(h - done); !s) return s;
  return ApplyFragment();
}

void Worker::SendFragment(int round, int f) {
  if (!stream_comm_) return;  // no group to stream on: the hash check at the round's end judges
  model_->GetParameters(local_);
  const Fragment fr = fragments_[static_cast<std::size_t>(f)];
  std::vector<float> delta(fr.size());
  for (std::size_t i = 0; i < delta.size(); ++i) {
    delta[i] = global_[fr.begin + i] - local_[fr.begin + i];
  }
  if (o_.hostility != Hostility::kNone && round >= o_.hostile_from_round) Corrupt(delta);
  stream_sent_.assign(local_.begin() + static_cast<std::ptrdiff_t>(fr.begin),
                      local_.begin() + static_cast<std::ptrdiff_t>(fr.end));
  if (error_.size() != global_.size()) error_.assign(global_.size(), 0.0f);
  stream_error_.assign(error_.begin() + static_cast<std::ptrdiff_t>(fr.begin),
                       error_.begin() + static_cast<std::ptrdiff_t>(fr.end));
  ExchangeSpec spec = stream_spec_;
  spec.round = FragmentRound(round, f, o_.stream_fragments);
  stream_.Start(
      f,
      [this, spec, delta = std::move(delta)]() -> BackgroundExchange::Result_ {
        std::string why;
        auto agg = Exchange(*stream_comm_, spec, delta, stream_error_, &why);
        if (agg && !agg->has_value()) return Error::Io(why);  // said by ApplyFragment
        return agg;
      },
      o_.stream_in_background);
}

// The pending fragment's result: the outer step on its slice, and the local fragment = the new
// global one + the inner steps taken since it was sent. A collective that failed: the fragment
// is not synced this round and the group is given up (a member that missed what the others
// applied is judged by the hashes).
Status Worker::ApplyFragment() {
  if (!stream_.pending()) return OkStatus();
  Enter(Phase::kCommunicate);
  const Fragment fr = fragments_[static_cast<std::size_t>(stream_.fragment())];
  auto r = stream_.Wait();
  const TrafficCounters t = stream_comm_->traffic();
  report_.traffic.bytes_sent += t.bytes_sent - stream_counted_.bytes_sent;
  report_.traffic.bytes_received += t.bytes_received - stream_counted_.bytes_received;
  stream_counted_ = t;
  Enter(Phase::kCompute);
  if (!r && r.error().kind() == ErrorKind::kIo) {
    Log(fmt::format("round {} fragment {}: {}; not synced this round", next_round_,
                    stream_.fragment(), r.error().message()));
    stream_comm_.reset();
    return OkStatus();
  }
  if (!r) return r.error();
  const Aggregate& agg = **r;
  for (const auto& rej : agg.rejected) {
    Log(fmt::format("round {} fragment {}: rank {} excluded: {}", next_round_, stream_.fragment(),
                    rej.rank, rej.detail));
  }
  std::copy(stream_error_.begin(), stream_error_.end(),
            error_.begin() + static_cast<std::ptrdiff_t>(fr.begin));
  outer_->StepSlice(std::span<float>(global_).subspan(fr.begin, fr.size()), agg.mean, fr.begin,
                    global_.size());
  model_->GetParameters(local_);
  // The new global fragment, with the inner steps taken since it was sent on top.
  for (std::size_t i = fr.begin; i < fr.end; ++i) {
    local_[i] = global_[i] + (local_[i] - stream_sent_[i - fr.begin]);
  }
  model_->SetParameters(local_);
  return OkStatus();
}

// Streaming starts again from the global model with no group (after a resync or a leave).
void Worker::RestartStream() {
  if (stream_.pending()) (void)stream_.Wait();
  stream_comm_.reset();
  stream_restart_ = true;
}

}  // namespace headroom::diloco::internal
