#include "diloco_comm/local_communicator.h"

#include <fmt/format.h>

#include <cassert>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/thread_annotations.h"

namespace headroom::diloco {

TrafficCounters AllGatherTraffic(std::size_t bytes, int size) {
  assert(size >= 1);
  const std::uint64_t n = bytes * static_cast<std::uint64_t>(size - 1);
  return {n, n};
}

TrafficCounters AllReduceTraffic(std::size_t floats, int size) {
  assert(size >= 1);
  const std::uint64_t k = static_cast<std::uint64_t>(size);
  const std::uint64_t chunk = (floats + k - 1) / k;
  const std::uint64_t n = 2 * (k - 1) * chunk * sizeof(float);
  return {n, n};
}

TrafficCounters AllToAllTraffic(std::size_t chunk_bytes, int size) {
  assert(size >= 1);
  const std::uint64_t n = chunk_bytes * static_cast<std::uint64_t>(size - 1);
  return {n, n};
}

TrafficCounters BroadcastTraffic(std::size_t bytes, int size, int rank, int root) {
  assert(size >= 1 && 0 <= rank && rank < size && 0 <= root && root < size);
  const int v = (rank - root + size) % size;
  TrafficCounters t;
  if (v != 0) t.bytes_received = bytes;
  for (std::int64_t step = 1; v + step < size; step *= 2) {
    if (step > v) t.bytes_sent += bytes;
  }
  return t;
}

namespace {

enum class Op { kAllGather, kAllToAll, kAllReduce, kBroadcast };

const char* OpName(Op op) {
  switch (op) {
    case Op::kAllGather:
      return "allgather";
    case Op::kAllToAll:
      return "alltoall";
    case Op::kAllReduce:
      return "allreduce";
    case Op::kBroadcast:
      return "broadcast";
  }
  return "?";
}

// The n-th collective call of every member.
struct Round {
  explicit Round(int size)
      : inputs(static_cast<size_t>(size)), arrived(static_cast<size_t>(size), false) {}
  // The first arrival's call; every later one must match it.
  Op op = Op::kAllGather;
  int root = 0;
  size_t length = 0;                              // bytes
  std::vector<std::vector<std::uint8_t>> inputs;  // by rank (a broadcast: the root's only)
  std::vector<bool> arrived;                      // by rank
  int arrivals = 0;
  bool done = false;                 // every member arrived; `result` computed
  std::optional<Error> failure;      // mismatched calls, or a member timed out in this round
  std::vector<std::uint8_t> result;  // allreduce: the sum; broadcast: the root's bytes
  int left = 0;                      // members that have returned from this round
};

// rank 0 + rank 1 + ... + rank k-1, element by element, in that order.
std::vector<std::uint8_t> SumInRankOrder(const std::vector<std::vector<std::uint8_t>>& inputs) {
  const size_t floats = inputs[0].size() / sizeof(float);
  std::vector<float> sum(floats);
  std::memcpy(sum.data(), inputs[0].data(), floats * sizeof(float));
  std::vector<float> term(floats);
  for (size_t r = 1; r < inputs.size(); ++r) {
    std::memcpy(term.data(), inputs[r].data(), floats * sizeof(float));
    for (size_t i = 0; i < floats; ++i) sum[i] += term[i];
  }
  std::vector<std::uint8_t> out(floats * sizeof(float));
  std::memcpy(out.data(), sum.data(), out.size());
  return out;
}

}  // namespace

struct LocalGroup::State {
  State(int n, double timeout, Waiter& w)
      : size(n),
        timeout_s(timeout),
        waiter(w),
        gone(static_cast<size_t>(n)),
        taken(static_cast<size_t>(n), false) {}

  // Constant after construction.
  const int size;
  const double timeout_s;
  Waiter& waiter;

  Mutex mu;
  std::condition_variable_any cv;
  // Why each member is gone ("killed", "timed out"); empty while it is a member.
  std::vector<std::string> gone GUARDED_BY(mu);
  std::vector<bool> taken GUARDED_BY(mu);                // Member(rank) called
  std::map<std::uint64_t, Round> rounds GUARDED_BY(mu);  // by call number
};

class LocalCommunicator final : public Communicator {
 public:
  using State = LocalGroup::State;
  LocalCommunicator(std::shared_ptr<State> state, int rank)
      : state_(std::move(state)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return state_->size; }

  Result<std::vector<std::vector<std::uint8_t>>> AllGather(
      std::span<const std::uint8_t> mine) override {
    std::vector<std::vector<std::uint8_t>> out;
    Status s =
        Call(Op::kAllGather, 0, mine.size(), std::vector<std::uint8_t>(mine.begin(), mine.end()),
             [&](const Round& round) { out = round.inputs; });
    if (!s.ok()) return std::move(s).error();
    Add(AllGatherTraffic(mine.size(), size()));
    return out;
  }

  Result<std::vector<std::vector<std::uint8_t>>> AllToAll(std::span<const std::uint8_t> mine,
                                                          std::size_t chunk_bytes) override {
    const size_t k = static_cast<size_t>(size());
    if (mine.size() != k * chunk_bytes) {
      return Error::Usage(fmt::format("{}: {} bytes are not {} chunks of {}", Where(Op::kAllToAll),
                                      mine.size(), k, chunk_bytes));
    }
    std::vector<std::vector<std::uint8_t>> out(k);
    const size_t me = static_cast<size_t>(rank_);
    Status s = Call(Op::kAllToAll, 0, mine.size(),
                    std::vector<std::uint8_t>(mine.begin(), mine.end()), [&](const Round& round) {
                      for (size_t r = 0; r < k; ++r) {
                        const auto from =
                            round.inputs[r].begin() + static_cast<std::ptrdiff_t>(me * chunk_bytes);
                        out[r].assign(from, from + static_cast<std::ptrdiff_t>(chunk_bytes));
                      }
                    });
    if (!s.ok()) return std::move(s).error();
    Add(AllToAllTraffic(chunk_bytes, size()));
    return out;
  }

  Status AllReduceSum(std::span<float> values) override {
    std::vector<std::uint8_t> bytes(values.size_bytes());
    if (!bytes.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
    const size_t length = bytes.size();
    Status s = Call(Op::kAllReduce, 0, length, std::move(bytes), [&](const Round& round) {
      if (!round.result.empty()) {
        std::memcpy(values.data(), round.result.data(), round.result.size());
      }
    });
    if (!s.ok()) return s;
    Add(AllReduceTraffic(values.size(), size()));
    return OkStatus();
  }

  Status Broadcast(std::span<std::uint8_t> bytes, int root) override {
    if (root < 0 || root >= size()) {
      return Error::Usage(fmt::format("{}: root {} out of range", Where(Op::kBroadcast), root));
    }
    std::vector<std::uint8_t> in;
    if (rank_ == root) in.assign(bytes.begin(), bytes.end());
    Status s = Call(Op::kBroadcast, root, bytes.size(), std::move(in), [&](const Round& round) {
      if (rank_ != root && !round.result.empty()) {
        std::memcpy(bytes.data(), round.result.data(), round.result.size());
      }
    });
    if (!s.ok()) return s;
    Add(BroadcastTraffic(bytes.size(), size(), rank_, root));
    return OkStatus();
  }

  TrafficCounters traffic() const override { return traffic_; }

 private:
  std::string Where(Op op) const {
    return fmt::format("local {} (rank {} of {})", OpName(op), rank_, size());
  }

  // Joins this member's next round with `input` (`length` bytes from each member; a
  // broadcast's members but the root bring none), waits until it completes, fails, or needs a
  // member that is gone, or until the timeout, and hands a completed round to `take` (under the
  // lock).
  template <class Take>
  Status Call(Op op, int root, size_t length, std::vector<std::uint8_t> input, Take take) {
    State& s = *state_;
    const size_t me = static_cast<size_t>(rank_);
    const std::uint64_t call = next_call_++;
    const double deadline_s = s.waiter.now_s() + s.timeout_s;
    MutexLock lock(s.mu);
    if (!s.gone[me].empty()) {
      return Error::Io(fmt::format("{}: this member is gone ({})", Where(op), s.gone[me]));
    }
    Round& round = s.rounds.try_emplace(call, s.size).first->second;
    if (round.arrivals == 0) {
      round.op = op;
      round.root = root;
      round.length = length;
    } else if (!round.failure && (round.op != op || round.root != root || round.length != length)) {
      round.failure = Error::Usage(fmt::format(
          "mismatched calls: rank {} called {} of {} bytes (root {}), an earlier member {} of {} "
          "bytes (root {})",
          rank_, OpName(op), length, root, OpName(round.op), round.length, round.root));
    }
    round.inputs[me] = std::move(input);
    round.arrived[me] = true;
    ++round.arrivals;
    // A member that is gone: this one (killed), or the first other one.
    auto gone_rank = [&]() REQUIRES(s.mu) -> int {
      if (!s.gone[me].empty()) return rank_;
      for (int r = 0; r < s.size; ++r) {
        if (!s.gone[static_cast<size_t>(r)].empty()) return r;
      }
      return -1;
    };
    if (round.arrivals == s.size && !round.failure && gone_rank() < 0) {
      if (op == Op::kAllReduce) {
        round.result = SumInRankOrder(round.inputs);
      } else if (op == Op::kBroadcast) {
        round.result = round.inputs[static_cast<size_t>(root)];
      }
      round.done = true;
    }
    s.cv.notify_all();

    s.waiter.WaitUntil(s.cv, s.mu, deadline_s, [&]() REQUIRES(s.mu) {
      return round.done || round.failure.has_value() || gone_rank() >= 0;
    });

    Status status = OkStatus();
    if (round.done) {
      take(round);
    } else if (round.failure) {
      status =
          Error(round.failure->kind(), fmt::format("{}: {}", Where(op), round.failure->message()));
    } else if (const int r = gone_rank(); r == rank_) {
      status = Error::Io(fmt::format("{}: this member is gone ({})", Where(op), s.gone[me]));
    } else if (r >= 0) {
      status = Error::Io(
          fmt::format("{}: rank {} is gone ({})", Where(op), r, s.gone[static_cast<size_t>(r)]));
    } else {
      std::string waiting;
      for (int q = 0; q < s.size; ++q) {
        if (round.arrived[static_cast<size_t>(q)]) continue;
        if (!waiting.empty()) waiting += ", ";
        waiting += std::to_string(q);
      }
      status = Error::Io(fmt::format("{}: timed out after {} s waiting for rank(s) {}", Where(op),
                                     s.timeout_s, waiting));
      // As a Gloo member that times out closes its connections: the others fail at once.
      s.gone[me] = "timed out";
      round.failure = Error::Io(fmt::format("rank {} is gone (timed out)", rank_));
      s.cv.notify_all();
    }
    if (++round.left == s.size) s.rounds.erase(call);
    return status;
  }

  void Add(const TrafficCounters& t) {
    traffic_.bytes_sent += t.bytes_sent;
    traffic_.bytes_received += t.bytes_received;
  }

  // Constant after construction.
  const std::shared_ptr<State> state_;
  const int rank_;
  // This member's thread only.
  std::uint64_t next_call_ = 0;
  TrafficCounters traffic_;
};

LocalGroup::LocalGroup(int size, double timeout_s, Waiter& waiter)
    : state_(std::make_shared<State>(size, timeout_s, waiter)) {
  assert(size >= 1 && timeout_s > 0);
}

LocalGroup::~LocalGroup() = default;

int LocalGroup::size() const { return state_->size; }
double LocalGroup::timeout_s() const { return state_->timeout_s; }

std::unique_ptr<Communicator> LocalGroup::Member(int rank) {
  assert(0 <= rank && rank < state_->size);
  {
    MutexLock lock(state_->mu);
    assert(!state_->taken[static_cast<size_t>(rank)]);
    state_->taken[static_cast<size_t>(rank)] = true;
  }
  return std::make_unique<LocalCommunicator>(state_, rank);
}

void LocalGroup::Kill(int rank) {
  assert(0 <= rank && rank < state_->size);
  MutexLock lock(state_->mu);
  std::string& why = state_->gone[static_cast<size_t>(rank)];
  if (why.empty()) why = "killed";
  state_->cv.notify_all();
}

}  // namespace headroom::diloco
