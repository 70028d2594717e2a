#pragma once
// The worker's class (worker.h's RunWorker), shared by the files that define its members:
// worker.cc (the run loop, rounds, control), worker_stream.cc (streaming's fragments). Not part
// of the library's interface.
#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coord/lease.h"
#include "coord/lease_keeper.h"
#include "diloco/accounting.h"
#include "diloco/exchange.h"
#include "diloco/recovery.h"
#include "diloco/round_group.h"
#include "diloco/stream.h"
#include "diloco/worker.h"

namespace headroom::diloco::internal {

inline constexpr double kPollS = 0.01;
inline constexpr double kControlPollS = 0.5;
inline constexpr double kMinDuty = 0.05;
inline constexpr double kPauseS = 0.1;  // a paused worker looks at its grant this often
// A scaled contribution is this many times its honest self (beyond the screen's factor 3).
inline constexpr float kHostileScale = 10.0f;

inline std::string Hex64(coord::LeaseId id) {
  return fmt::format("{:016x}", static_cast<uint64_t>(id));
}

using Phase = Accounting::Phase;

// One worker: the run loop, the inner steps, run-time control, and a round from its inner
// steps to its hash (the group and the hashes: round_group.h; joining: recovery.h; the phases:
// accounting.h).
class Worker {
 public:
  Worker(coord::Store& store, const CommFactory& comm, const ModelFactory& model,
         const WorkerOptions& o, const WorkerClock& clock)
      : store_(store),
        comm_(comm),
        model_factory_(model),
        o_(o),
        clock_(clock),
        accounting_(report_, clock_, o.computing),
        lease_(store, static_cast<int64_t>(std::ceil(o.lease_ttl_s)), o.lease_ttl_s / 3.0) {
    me_.store = &store_;
    me_.prefix = RunPrefix(o.run);
    me_.now_s = clock_.now_s;
    me_.pause = [this] { return Sleep(); };
  }

  Result<WorkerReport> Run();

 private:
  void Enter(Phase p) { accounting_.Enter(p); }
  void Log(const std::string& line) { accounting_.Log(line); }

  Status KeepAlive(bool force = false) {
    if (keeper_) {
      if (keeper_->lost())
        return Error::NotFound(std::string("lease: ") + std::string(coord::kLeaseGone));
      return OkStatus();
    }
    const double now = clock_.now_s();
    if (!force && lease_.held() && !lease_.Due(now)) return OkStatus();  // (gone: said again)
    auto r = lease_.Renew(now);
    if (!r) return Error(r.error().kind(), "lease: " + r.error().message());  // its kind kept
    return OkStatus();
  }

  Status Sleep() {
    clock_.sleep_s(kPollS);
    return KeepAlive();
  }

  // Whether the store no longer has my lease (it lapsed while I was stopped, or etcd was
  // unreachable for longer than its TTL): the background keeper saw it, or the store says so.
  bool LeaseGone() {
    if (keeper_) return keeper_->lost();
    auto r = lease_.Renew(clock_.now_s());
    return !r && coord::IsLeaseGone(r.error());
  }

  Status Register();
  Status Publish(int joined_round) {
    return PublishMember(me_, report_.name, static_cast<int>(getpid()), joined_round);
  }
  std::string ConfigJson() const;
  Status WaitForStart();
  Status TrainInner(int steps);
  Status PollControl(bool force);
  void ApplyGrant();
  Status Leave();
  Result<bool> DilocoRound(int round);
  Status TrainRound(int round);
  void SendFragment(int round, int f);
  Status ApplyFragment();
  void RestartStream();
  Result<std::optional<Aggregate>> ExchangeSlice(Communicator& c, const ExchangeSpec& spec,
                                                 const std::vector<float>& delta, Fragment slice,
                                                 std::string* why);
  void Corrupt(std::vector<float>& delta) const;
  Result<bool> ApplyRound(int round, int attempt, const std::vector<std::string>& group, int rank,
                          const Aggregate& aggregate, Fragment slice);
  Status CheckHashes(int round, const std::vector<std::string>& group, int my_rank, bool& evicted,
                     bool& donor);
  Status Donate(int round, const std::vector<std::string>& group);
  Status Resync();
  Result<WorkerReport> RunDdp();
  RunState State() const;

  coord::Store& store_;
  const CommFactory& comm_;
  const ModelFactory& model_factory_;
  WorkerOptions o_;
  WorkerClock clock_;
  WorkerReport report_;
  Accounting accounting_;
  RunMember me_;

  coord::Lease lease_;  // renewed on my clock, or by keeper_'s thread (which adopts it)
  std::unique_ptr<coord::LeaseKeeper> keeper_;  // renew_in_background

  std::unique_ptr<Model> model_;
  std::vector<float> global_;  // the model at the start of the round (the last agreed one)
  std::vector<float> local_;
  std::vector<float> error_;  // int8 error feedback
  std::unique_ptr<OuterSgd> outer_;
  int next_round_ = 0;
  std::uint64_t run_tokens_ = 0;  // tokens in accepted contributions, the whole run, to here
  std::vector<std::string> last_group_;
  int last_rejected_ = 0;  // contributions the last round's screen excluded
  int threads_ = 1;
  double duty_ = 1.0;          // what the worker runs at: control's, lowered by the grant
  double control_duty_ = 1.0;  // control/<name>'s
  bool paused_ = false;        // the grant allows less than kMinDuty
  bool leave_requested_ = false;
  double control_read_s_ = -1e9;
  // Streaming (stream.h): the fragments; the last round's group, its spec and my key in it;
  // the model to start the next round from global_ (after a resync, or no group to stream on).
  std::vector<Fragment> fragments_;
  std::unique_ptr<Communicator> stream_comm_;
  ExchangeSpec stream_spec_;
  std::vector<std::uint8_t> stream_key_;
  TrafficCounters stream_counted_;   // stream_comm_'s traffic already in the report
  std::vector<float> stream_error_;  // the pending fragment's error feedback
  std::vector<float> stream_sent_;   // the pending fragment's local values when it was sent
  bool stream_restart_ = true;
  BackgroundExchange stream_;  // after stream_comm_: joined before it goes
};

}  // namespace headroom::diloco::internal
