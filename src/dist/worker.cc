#include "dist/worker.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "dist/digest.h"

namespace headroom::dist {

using nlohmann::json;

Result<Hostility> ParseHostility(const std::string& name) {
  if (name == "none") return Hostility::kNone;
  if (name == "scale") return Hostility::kScale;
  if (name == "flip") return Hostility::kFlip;
  if (name == "nan") return Hostility::kNan;
  if (name == "forge") return Hostility::kForge;
  return Error::Usage("--hostile: '" + name + "' is not one of none, scale, flip, nan, forge");
}

std::string RunPrefix(const std::string& run) { return "/headroom-diloco/" + run + "/"; }

namespace {

constexpr double kPollS = 0.01;
constexpr double kControlPollS = 0.5;
constexpr double kMinDuty = 0.05;
constexpr double kPauseS = 0.1;  // a paused worker looks at its grant this often
// A scaled contribution is this many times its honest self (beyond the screen's factor 3).
constexpr float kHostileScale = 10.0f;

std::string Hex64(coord::LeaseId id) { return fmt::format("{:016x}", static_cast<uint64_t>(id)); }

std::string RoundKey(int round) { return fmt::format("{:08d}", round); }

struct Member {
  std::string id;
  int joined_round = -1;
};

// Renews a lease every period on its own thread, so that a collective blocked on a slow peer
// (up to the collective timeout, twice when connecting) never lets the member's lease lapse.
// Waits on the steady clock: the one place the worker keeps time of its own.
class LeaseKeeper {
 public:
  LeaseKeeper(coord::Store& store, coord::LeaseId lease, double period_s)
      : store_(store), lease_(lease), period_s_(period_s), thread_([this] { Loop(); }) {}
  ~LeaseKeeper() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;
  bool lost() const { return lost_.load(); }

 private:
  void Loop() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::duration<double>(period_s_), [this] { return stop_; });
      if (stop_) break;
      lock.unlock();
      auto r = store_.LeaseKeepAlive(lease_);
      // A store that does not answer is retried next period; a lease etcd no longer has is lost.
      if (!r && coord::IsLeaseGone(r.error())) lost_ = true;
      lock.lock();
      if (lost_) break;
    }
  }

  coord::Store& store_;
  const coord::LeaseId lease_;
  const double period_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<bool> lost_{false};
  std::thread thread_;
};

class Worker {
 public:
  Worker(coord::Store& store, const CommFactory& comm, const lm::Corpus& corpus,
         const WorkerOptions& o, const WorkerClock& clock)
      : store_(store),
        comm_(comm),
        corpus_(corpus),
        o_(o),
        clock_(clock),
        prefix_(RunPrefix(o.run)) {}

  Result<WorkerReport> Run();

 private:
  // Phases of the accounting (docs/DILOCO.md, "Accounting").
  enum class Phase { kCompute, kCommunicate, kWait, kRecover, kThrottled };
  void Enter(Phase p) {
    const double now = clock_.now_s();
    const double cpu = clock_.cpu_s();
    const double dt = now - phase_start_;
    const double dcpu = cpu - phase_cpu_;
    switch (phase_) {
      case Phase::kCompute:
        report_.compute_s += dt;
        report_.compute_cpu_s += dcpu;
        break;
      case Phase::kCommunicate:
        report_.communicate_s += dt;
        report_.other_cpu_s += dcpu;
        break;
      case Phase::kWait:
        report_.wait_s += dt;
        report_.other_cpu_s += dcpu;
        break;
      case Phase::kRecover:
        report_.recover_s += dt;
        report_.other_cpu_s += dcpu;
        break;
      case Phase::kThrottled:
        report_.throttled_s += dt;
        report_.other_cpu_s += dcpu;
        break;
    }
    if (o_.computing && (p == Phase::kCompute) != (phase_ == Phase::kCompute)) {
      o_.computing(p == Phase::kCompute);
    }
    phase_ = p;
    phase_start_ = now;
    phase_cpu_ = cpu;
  }

  void Log(std::string line) {
    report_.log.push_back(
        fmt::format("{:.3f} {} {}", clock_.now_s() - start_s_, report_.name, line));
  }

  Status KeepAlive(bool force = false) {
    if (keeper_) {
      if (keeper_->lost())
        return Error::Io(std::string("lease: ") + std::string(coord::kLeaseGone));
      return OkStatus();
    }
    const double now = clock_.now_s();
    if (!force && now - last_renew_s_ < o_.lease_ttl_s / 3.0) return OkStatus();
    auto r = store_.LeaseKeepAlive(lease_);
    if (!r) return Error::Io("lease: " + r.error().message());
    last_renew_s_ = now;
    return OkStatus();
  }

  Status Sleep() {
    clock_.sleep_s(kPollS);
    return KeepAlive();
  }

  Status Register();
  Status PublishMember(int joined_round);
  Result<std::vector<Member>> LiveMembers();
  Status CheckConfig();
  Result<bool> RunStarted();
  Status WaitForStart();
  Result<std::vector<std::string>> CloseGroup(int round, int attempt,
                                              const std::vector<std::string>& candidates,
                                              double deadline_s);
  Status TrainInner(int steps);
  Status PollControl(bool force);
  void ApplyGrant();
  Status Leave();
  Result<bool> DilocoRound(int round);
  Status CheckHashes(int round, const std::vector<std::string>& group, int my_rank, bool& evicted,
                     bool& donor);
  Status Donate(int round, const std::vector<std::string>& group);
  Status ServeJoins(int round);
  Status Resync();
  Result<WorkerReport> RunDdp();
  std::vector<std::uint8_t> StateBlob() const;
  Status LoadStateBlob(std::span<const std::uint8_t> blob);

  coord::Store& store_;
  const CommFactory& comm_;
  const lm::Corpus& corpus_;
  WorkerOptions o_;
  WorkerClock clock_;
  std::string prefix_;

  coord::LeaseId lease_ = 0;
  std::unique_ptr<LeaseKeeper> keeper_;
  std::string id_;
  double last_renew_s_ = 0;
  double start_s_ = 0;
  Phase phase_ = Phase::kWait;
  double phase_start_ = 0, phase_cpu_ = 0;

  std::unique_ptr<lm::ByteLm> model_;
  std::unique_ptr<lm::BatchSampler> sampler_;
  std::vector<lm::Batch> val_batches_;
  std::vector<float> global_;  // the model at the start of the round (the last agreed one)
  std::vector<float> local_;
  std::vector<float> error_;  // int8 error feedback
  std::unique_ptr<OuterSgd> outer_;
  lm::OptimizerState inner_;  // a donor's inner state, as received
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
  WorkerReport report_;
};

Status Worker::Register() {
  auto lease = store_.LeaseGrant(static_cast<int64_t>(std::ceil(o_.lease_ttl_s)));
  if (!lease) return Error::Io("register: " + lease.error().message());
  keeper_.reset();
  lease_ = *lease;
  id_ = Hex64(lease_);
  if (o_.renew_in_background) {
    keeper_ = std::make_unique<LeaseKeeper>(store_, lease_, o_.lease_ttl_s / 3.0);
  }
  last_renew_s_ = clock_.now_s();
  report_.member = id_;
  return OkStatus();
}

Status Worker::PublishMember(int joined_round) {
  json m = {
      {"name", report_.name}, {"pid", static_cast<int>(getpid())}, {"joined_round", joined_round}};
  auto r = store_.Put(prefix_ + "members/" + id_, m.dump(), lease_);
  if (!r) return Error::Io("member: " + r.error().message());
  return OkStatus();
}

Result<std::vector<Member>> Worker::LiveMembers() {
  auto r = store_.Get(prefix_ + "members/", true);
  if (!r) return Error::Io("members: " + r.error().message());
  std::vector<Member> out;
  for (const auto& kv : r->kvs) {
    Member m;
    m.id = kv.key.substr(kv.key.rfind('/') + 1);
    auto j = json::parse(kv.value, nullptr, false);
    if (j.is_discarded() || !j.contains("joined_round") || !j["joined_round"].is_number_integer()) {
      continue;  // not a member record: ignored, never trusted in part
    }
    m.joined_round = j["joined_round"].get<int>();
    out.push_back(m);
  }
  return out;
}

Status Worker::CheckConfig() {
  json c = {{"mode", o_.mode},
            {"model", o_.model},
            {"inner_steps", o_.inner_steps},
            {"rounds", o_.rounds},
            {"batch", o_.batch},
            {"seq_len", o_.seq_len},
            {"seed", o_.seed},
            {"compress", CodecName(o_.codec)},
            {"outer_lr", o_.outer.lr},
            {"outer_momentum", o_.outer.momentum}};
  if (!o_.init_parameters.empty()) c["init"] = Hex(Sha256Floats(o_.init_parameters));
  coord::TxnRequest t;
  t.compare.push_back(
      coord::Compare::CreateRevision(prefix_ + "config", coord::Compare::Result::kEqual, 0));
  t.success.push_back(coord::Op::Put(prefix_ + "config", c.dump()));
  t.failure.push_back(coord::Op::Get(prefix_ + "config"));
  auto r = store_.Txn(t);
  if (!r) return Error::Io("config: " + r.error().message());
  if (r->succeeded) return OkStatus();
  if (r->responses.empty() || r->responses[0].empty()) return Error::Io("config: unreadable");
  auto theirs = json::parse(r->responses[0][0].value, nullptr, false);
  if (theirs != c) {
    return Error::Usage("run '" + o_.run + "' has other settings in the store: " +
                        r->responses[0][0].value + "; mine: " + c.dump());
  }
  return OkStatus();
}

// Whether a round has completed (a newcomer then joins through a donor).
Result<bool> Worker::RunStarted() {
  auto r = store_.Get(prefix_ + "rounds/", true);
  if (!r) return Error::Io("rounds: " + r.error().message());
  for (const auto& kv : r->kvs) {
    if (kv.key.ends_with("/agreed")) return true;
  }
  return false;
}

Status Worker::WaitForStart() {
  const double until = clock_.now_s() + o_.min_deadline_s;
  while (clock_.now_s() < until) {
    auto m = LiveMembers();
    if (!m) return m.error();
    if (static_cast<int>(m->size()) >= o_.start_workers) break;
    if (auto s = Sleep(); !s) return s;
  }
  return OkStatus();
}

// Arrives at (round, attempt) and returns its group: every member that arrived before the group
// closed. Closes it (create-if-absent) when every candidate still alive has arrived, or when
// deadline_s has passed since this worker arrived.
Result<std::vector<std::string>> Worker::CloseGroup(int round, int attempt,
                                                    const std::vector<std::string>& candidates,
                                                    double deadline_s) {
  const std::string base = prefix_ + "rounds/" + RoundKey(round) + "/" + std::to_string(attempt);
  if (auto p = store_.Put(base + "/arrive/" + id_, "{}", lease_); !p) {
    return Error::Io("arrive: " + p.error().message());
  }
  const double arrived = clock_.now_s();
  while (true) {
    auto g = store_.Get(base + "/group");
    if (!g) return Error::Io("group: " + g.error().message());
    if (!g->kvs.empty()) {
      auto j = json::parse(g->kvs[0].value, nullptr, false);
      if (j.is_discarded() || !j.contains("members")) return Error::Io("group: unreadable");
      return j["members"].get<std::vector<std::string>>();
    }
    auto a = store_.Get(base + "/arrive/", true);
    if (!a) return Error::Io("arrivals: " + a.error().message());
    std::set<std::string> in;
    for (const auto& kv : a->kvs) in.insert(kv.key.substr(kv.key.rfind('/') + 1));
    auto live = LiveMembers();
    if (!live) return live.error();
    std::set<std::string> alive;
    for (const auto& m : *live) alive.insert(m.id);
    bool all = true;
    for (const auto& c : candidates) {
      if (alive.count(c) && !in.count(c)) all = false;
    }
    if (all || clock_.now_s() - arrived > deadline_s) {
      std::vector<std::string> members(in.begin(), in.end());  // sorted: the ranks
      coord::TxnRequest t;
      t.compare.push_back(
          coord::Compare::CreateRevision(base + "/group", coord::Compare::Result::kEqual, 0));
      t.success.push_back(coord::Op::Put(base + "/group", json{{"members", members}}.dump()));
      if (auto r = store_.Txn(t); !r) return Error::Io("close group: " + r.error().message());
      continue;  // read back whichever group won
    }
    if (auto s = Sleep(); !s) return s.error();
  }
}

// control/<name>: {"threads": N, "duty": D, "leave": B}, read at most every kControlPollS
// between inner steps. threads: libtorch's; duty in (0, 1]: after a step of d seconds the
// worker idles d (1 - D) / D; leave: at the next round boundary it stops being a candidate
// (the others do not wait for it) until leave is false again, then rejoins through a donor.
Status Worker::PollControl(bool force) {
  const double now = clock_.now_s();
  if (!force && now - control_read_s_ < kControlPollS) {
    ApplyGrant();
    return OkStatus();
  }
  control_read_s_ = now;
  auto r = store_.Get(prefix_ + "control/" + report_.name);
  if (!r) return Error::Io("control: " + r.error().message());
  json c = json::object();
  if (!r->kvs.empty()) {
    c = json::parse(r->kvs[0].value, nullptr, false);
    if (c.is_discarded() || !c.is_object()) {
      Log("control: not a JSON object; ignored");
      return OkStatus();
    }
  }
  if (c.contains("threads") && c["threads"].is_number_integer()) {
    const int t = c["threads"].get<int>();
    if (t >= 1 && t <= 256 && t != threads_) {
      threads_ = t;
      lm::SetThreads(t);
      Log(fmt::format("control: {} threads", t));
    }
  }
  double duty = 1.0;
  if (c.contains("duty") && c["duty"].is_number()) {
    duty = std::clamp(c["duty"].get<double>(), kMinDuty, 1.0);
  }
  if (duty != control_duty_) {
    control_duty_ = duty;
    Log(fmt::format("control: duty {:.2f}", duty));
  }
  leave_requested_ = c.value("leave", false) == true;
  ApplyGrant();
  return OkStatus();
}

// The duty in force: control's, lowered to what the power grant allows (paused below
// kMinDuty).
void Worker::ApplyGrant() {
  double duty = control_duty_;
  bool paused = false;
  if (o_.granted_duty) {
    const double g = o_.granted_duty(threads_, control_duty_);
    paused = !(g >= kMinDuty);
    duty = std::min(duty, std::max(g, kMinDuty));
  }
  if (paused != paused_) Log(paused ? "grant: paused" : "grant: resumed");
  paused_ = paused;
  duty_ = duty;
}

Status Worker::TrainInner(int steps) {
  for (int s = 0; s < steps; ++s) {
    // The grant in force before every step (a wait or a collective may have outlasted one).
    ApplyGrant();
    while (paused_) {
      Enter(Phase::kThrottled);
      clock_.sleep_s(kPauseS);
      if (auto k = KeepAlive(); !k) return k;
      if (auto c = PollControl(false); !c) return c;
    }
    Enter(Phase::kCompute);
    const double t0 = clock_.now_s();
    model_->TrainStep(sampler_->Next());
    const double step_s = clock_.now_s() - t0;
    if (auto k = KeepAlive(); !k) return k;
    if (auto c = PollControl(false); !c) return c;
    if (duty_ < 1.0) {
      Enter(Phase::kThrottled);
      clock_.sleep_s(step_s * (1.0 - duty_) / duty_);
    }
  }
  Enter(Phase::kCompute);
  return OkStatus();
}

// Out of the run until control says leave: false and the grant allows work again; then back
// in through a donor (at once when no round was agreed meanwhile).
Status Worker::Leave() {
  Enter(Phase::kThrottled);
  if (auto p = PublishMember(-1); !p) return p;
  Log(fmt::format("left before round {} ({})", next_round_,
                  paused_ ? "no power granted" : "asked to"));
  ++report_.leaves;
  while (leave_requested_ || paused_) {
    auto last = store_.Get(prefix_ + "rounds/" + RoundKey(o_.rounds - 1) + "/agreed");
    if (!last) return Error::Io("leave: " + last.error().message());
    if (!last->kvs.empty()) {
      next_round_ = o_.rounds;
      return OkStatus();
    }
    clock_.sleep_s(kControlPollS);
    if (auto k = KeepAlive(); !k) return k;
    if (auto c = PollControl(true); !c) return c;
  }
  // Nothing agreed while I was out (every member paused, or the run not started): my model is
  // the run's; back in at once, no donor needed (there may be none).
  auto mine = store_.Get(prefix_ + "rounds/" + RoundKey(next_round_) + "/agreed");
  if (!mine) return Error::Io("leave: " + mine.error().message());
  if (mine->kvs.empty()) {
    Log(fmt::format("back before round {}: nothing agreed while I was out", next_round_));
    return PublishMember(next_round_);
  }
  return Resync();
}

// The state a donor sends: round and tokens, the model, the outer momentum, and the donor's
// inner AdamW (schedule step, AdamW step, moments).
std::size_t StateBlobBytes(std::size_t n) { return 32 + 16 * n; }

std::vector<std::uint8_t> Worker::StateBlob() const {
  const std::size_t n = global_.size();
  std::vector<std::uint8_t> blob(StateBlobBytes(n));
  const std::uint64_t head[4] = {static_cast<std::uint64_t>(next_round_), run_tokens_, 0, 0};
  std::memcpy(blob.data(), head, 16);
  const lm::OptimizerState inner = model_->GetOptimizerState();
  const std::int64_t steps[2] = {inner.schedule_step, inner.adam_step};
  std::memcpy(blob.data() + 16, steps, 16);
  std::uint8_t* at = blob.data() + 32;
  std::memcpy(at, global_.data(), 4 * n);
  if (outer_->started()) std::memcpy(at + 4 * n, outer_->momentum().data(), 4 * n);
  std::memcpy(at + 8 * n, inner.exp_avg.data(), 4 * n);
  std::memcpy(at + 12 * n, inner.exp_avg_sq.data(), 4 * n);
  return blob;
}

Status Worker::LoadStateBlob(std::span<const std::uint8_t> blob) {
  const std::size_t n = global_.size();
  if (blob.size() != StateBlobBytes(n)) return Error::Io("state: wrong size");
  std::uint64_t head[2];
  std::memcpy(head, blob.data(), 16);
  std::int64_t steps[2];
  std::memcpy(steps, blob.data() + 16, 16);
  const std::uint8_t* at = blob.data() + 32;
  run_tokens_ = head[1];
  std::memcpy(global_.data(), at, 4 * n);
  std::vector<float> momentum(n);
  std::memcpy(momentum.data(), at + 4 * n, 4 * n);
  const bool started =
      std::any_of(momentum.begin(), momentum.end(), [](float x) { return x != 0; });
  outer_ = std::make_unique<OuterSgd>(o_.outer);
  if (started) outer_->set_momentum(std::move(momentum));
  inner_.schedule_step = steps[0];
  inner_.adam_step = steps[1];
  inner_.exp_avg.resize(n);
  inner_.exp_avg_sq.resize(n);
  std::memcpy(inner_.exp_avg.data(), at + 8 * n, 4 * n);
  std::memcpy(inner_.exp_avg_sq.data(), at + 12 * n, 4 * n);
  next_round_ = static_cast<int>(head[0]);
  return OkStatus();
}

// Hashes after round `round`: the majority (ties: the lowest rank's) is the round's model. A
// member whose hash differs is evicted: it resyncs from the donor, the lowest rank holding it.
Status Worker::CheckHashes(int round, const std::vector<std::string>& group, int my_rank,
                           bool& evicted, bool& donor) {
  Enter(Phase::kWait);
  const std::string base = prefix_ + "rounds/" + RoundKey(round) + "/hash/";
  const std::string mine = Hex(Sha256Floats(global_));
  if (auto p = store_.Put(base + id_, mine, lease_); !p)
    return Error::Io("hash: " + p.error().message());
  const double until = clock_.now_s() + o_.collective_timeout_s;
  std::map<std::string, std::string> hashes;
  while (true) {
    auto r = store_.Get(base, true);
    if (!r) return Error::Io("hashes: " + r.error().message());
    hashes.clear();
    for (const auto& kv : r->kvs) hashes[kv.key.substr(kv.key.rfind('/') + 1)] = kv.value;
    bool all = true;
    for (const auto& g : group) all = all && hashes.count(g);
    if (all || clock_.now_s() > until) break;
    if (auto s = Sleep(); !s) return s;
  }
  std::map<std::string, int> votes;
  for (const auto& g : group) {
    if (hashes.count(g)) ++votes[hashes[g]];
  }
  std::string majority;
  int best = 0;
  for (const auto& g : group) {  // rank order: a tie goes to the lowest rank's hash
    if (!hashes.count(g)) continue;
    const int v = votes[hashes[g]];
    if (v > best) {
      best = v;
      majority = hashes[g];
    }
  }
  if (votes.size() > 1) {
    report_.hashes_agreed = false;
    for (const auto& g : group) {
      if (hashes.count(g) && hashes[g] != majority) ++report_.evictions;
    }
  }
  evicted = mine != majority;
  donor = false;
  if (!evicted) {
    for (int i = 0; i < static_cast<int>(group.size()); ++i) {
      if (hashes.count(group[i]) && hashes[group[i]] == majority) {
        donor = i == my_rank;
        break;
      }
    }
  }
  if (evicted)
    Log(fmt::format("round {}: my hash {} is not the round's {}: evicted", round,
                    mine.substr(0, 12), majority.substr(0, 12)));
  return OkStatus();
}

Status Worker::Donate(int round, const std::vector<std::string>& group) {
  json agreed = {{"round", round},
                 {"hash", Hex(Sha256Floats(global_))},
                 {"members", group},
                 {"tokens", run_tokens_},
                 {"rejected", last_rejected_}};
  if (o_.eval_every > 0 && (round % o_.eval_every == 0 || round + 1 == o_.rounds)) {
    Enter(Phase::kCompute);
    model_->SetParameters(global_);
    const double loss = lm::ValidationLoss(*model_, val_batches_);
    agreed["val_loss"] = loss;
    report_.loss_curve.push_back({run_tokens_, loss});
    report_.final_val_loss = loss;
    if (round + 1 == o_.rounds) report_.final_params = global_;
    Enter(Phase::kWait);
  }
  if (auto p = store_.Put(prefix_ + "rounds/" + RoundKey(round) + "/agreed", agreed.dump()); !p) {
    return Error::Io("agreed: " + p.error().message());
  }
  return ServeJoins(round);
}

// The donor sends the round's state to each member asking to (re)join, over a group of two.
Status Worker::ServeJoins(int round) {
  auto r = store_.Get(prefix_ + "joins/", true);
  if (!r) return Error::Io("joins: " + r.error().message());
  for (const auto& kv : r->kvs) {
    const std::string rest = kv.key.substr((prefix_ + "joins/").size());
    if (rest.find('/') != std::string::npos) continue;  // an answer, not a request
    Enter(Phase::kRecover);
    const std::string serve = prefix_ + "joins/" + rest + "/serve";
    const std::string gloo = prefix_ + "joins/" + rest + "/" + RoundKey(round) + "/";
    if (auto p = store_.Put(serve, json{{"round", round}, {"prefix", gloo}}.dump()); !p) {
      return Error::Io("serve: " + p.error().message());
    }
    auto c = comm_(gloo, 0, 2, o_.collective_timeout_s);
    if (c) {
      auto blob = StateBlob();
      if (auto b = (*c)->Broadcast(blob, 0); b) {
        Log(fmt::format("round {}: sent the model to {}", round, rest));
        report_.traffic.bytes_sent += (*c)->traffic().bytes_sent;
      } else {
        Log(fmt::format("round {}: sending the model to {} failed: {}", round, rest,
                        b.error().message()));
      }
    } else {
      Log(fmt::format("round {}: {} did not connect: {}", round, rest, c.error().message()));
    }
    (void)store_.Delete(kv.key, true);  // served (or gone): it asks again if it still needs to
    if (auto k = KeepAlive(true); !k) return k;
  }
  Enter(Phase::kWait);
  return OkStatus();
}

// Fetches the last agreed model and outer state from that round's donor and checks it against
// the round's recorded SHA-256.
Status Worker::Resync() {
  Enter(Phase::kRecover);
  ++report_.resyncs;
  if (auto p = PublishMember(-1); !p) return p;
  const std::string request = prefix_ + "joins/" + id_;
  while (true) {
    (void)store_.Delete(request + "/serve");
    if (auto p = store_.Put(request, "{}", lease_); !p)
      return Error::Io("join: " + p.error().message());
    json serve;
    while (true) {
      auto s = store_.Get(request + "/serve");
      if (!s) return Error::Io("join: " + s.error().message());
      if (!s->kvs.empty()) {
        serve = json::parse(s->kvs[0].value, nullptr, false);
        break;
      }
      // The run's last round is done: nothing left to join.
      auto last = store_.Get(prefix_ + "rounds/" + RoundKey(o_.rounds - 1) + "/agreed");
      if (!last) return Error::Io("join: " + last.error().message());
      if (!last->kvs.empty()) {
        (void)store_.Delete(request, true);
        next_round_ = o_.rounds;
        Log("join: the run ended before a donor served me");
        return OkStatus();
      }
      if (auto k = Sleep(); !k) return k;
    }
    if (serve.is_discarded() || !serve.contains("round") || !serve.contains("prefix")) continue;
    const int round = serve["round"].get<int>();
    if (auto k = KeepAlive(true); !k) return k;
    auto c = comm_(serve["prefix"].get<std::string>(), 1, 2, o_.collective_timeout_s);
    if (!c) {
      Log("join: " + c.error().message());
      continue;
    }
    std::vector<std::uint8_t> blob(StateBlobBytes(global_.size()));
    if (auto b = (*c)->Broadcast(blob, 0); !b) {
      Log("join: " + b.error().message());
      continue;
    }
    report_.traffic.bytes_received += (*c)->traffic().bytes_received;
    auto agreed = store_.Get(prefix_ + "rounds/" + RoundKey(round) + "/agreed");
    if (!agreed || agreed->kvs.empty()) continue;
    auto a = json::parse(agreed->kvs[0].value, nullptr, false);
    if (auto l = LoadStateBlob(blob); !l) return l;
    const std::string got = Hex(Sha256Floats(global_));
    if (a.is_discarded() || !a.contains("hash") || a["hash"].get<std::string>() != got) {
      Log(fmt::format("join: the model sent for round {} hashes to {}, not the recorded one", round,
                      got.substr(0, 12)));
      continue;
    }
    next_round_ = round + 1;
    model_->SetParameters(global_);
    model_->SetOptimizerState(inner_);  // the donor's: my first round is an ordinary one
    error_.assign(global_.size(), 0.0f);
    if (auto p = PublishMember(next_round_); !p) return p;
    Log(fmt::format("joined at round {} (hash {} checked)", next_round_, got.substr(0, 12)));
    return OkStatus();
  }
}

// One outer round: H inner steps, then the group, the all-gather, the screen, the outer step
// and the hash check; attempts again without whoever broke a collective. Returns false when I
// am not in the round's result (left out, evicted) and have resynced.
Result<bool> Worker::DilocoRound(int round) {
  model_->SetParameters(global_);
  const double t0 = clock_.now_s();
  if (auto s = TrainInner(o_.inner_steps); !s) return s.error();
  const double compute_s = clock_.now_s() - t0;
  model_->GetParameters(local_);
  std::vector<float> delta(global_.size());
  for (std::size_t i = 0; i < delta.size(); ++i) delta[i] = global_[i] - local_[i];
  if (o_.hostility != Hostility::kNone && round >= o_.hostile_from_round) {
    for (auto& x : delta) {
      if (o_.hostility == Hostility::kScale) x *= kHostileScale;
      if (o_.hostility == Hostility::kFlip) x = -x;
    }
    if (o_.hostility == Hostility::kNan) delta[delta.size() / 2] = std::nanf("");
  }
  const std::vector<float> error_before = error_;

  std::vector<std::string> candidates;
  auto live = LiveMembers();
  if (!live) return live.error();
  for (const auto& m : *live) {
    if (m.joined_round >= 0 && m.joined_round <= round) candidates.push_back(m.id);
  }
  for (int attempt = 0;; ++attempt) {
    Enter(Phase::kWait);
    const double deadline = std::max(o_.min_deadline_s, o_.deadline_factor * compute_s);
    auto group = CloseGroup(round, attempt, candidates, deadline);
    if (!group) return group.error();
    const auto me = std::find(group->begin(), group->end(), id_);
    if (me == group->end()) {
      Log(fmt::format("round {}: left out of the group (arrived after it closed)", round));
      if (auto s = Resync(); !s) return s.error();
      return false;
    }
    const int rank = static_cast<int>(me - group->begin());
    if (attempt == 0 && !last_group_.empty() && *group != last_group_) ++report_.membership_changes;
    Enter(Phase::kCommunicate);
    error_ = error_before;
    auto payload = Encode(o_.codec, delta, error_);
    std::vector<std::uint64_t> members;
    for (const auto& g : *group) members.push_back(std::stoull(g, nullptr, 16));
    std::vector<std::uint8_t> key = o_.key;
    if (o_.hostility == Hostility::kForge && round >= o_.hostile_from_round) {
      key.push_back(0x5a);  // signs with a key that is not the run's
    }
    auto frame = SealFrame(
        {static_cast<std::uint32_t>(rank), static_cast<std::uint64_t>(round), members[rank]},
        o_.codec, payload, key);
    const std::string gloo =
        prefix_ + "rounds/" + RoundKey(round) + "/" + std::to_string(attempt) + "/gloo/";
    if (auto k = KeepAlive(true); !k) return k.error();
    auto c = comm_(gloo, rank, static_cast<int>(group->size()), o_.collective_timeout_s);
    Result<std::vector<std::vector<std::uint8_t>>> frames =
        c ? (*c)->AllGather(frame) : Result<std::vector<std::vector<std::uint8_t>>>(c.error());
    if (c) {
      report_.traffic.bytes_sent += (*c)->traffic().bytes_sent;
      report_.traffic.bytes_received += (*c)->traffic().bytes_received;
    }
    if (!frames) {
      Log(fmt::format("round {} attempt {}: {}; again without whoever is gone", round, attempt,
                      frames.error().message()));
      Enter(Phase::kRecover);
      // The next attempt's candidates: this group's members still alive.
      candidates = *group;
      continue;
    }
    auto agg = AggregateRound(*frames, static_cast<std::uint64_t>(round), members, o_.codec,
                              global_.size(), o_.key, o_.screen);
    if (!agg) return agg.error();
    last_rejected_ = static_cast<int>(agg->rejected.size());
    for (const auto& rej : agg->rejected) {
      ++report_.evictions;
      Log(fmt::format("round {}: rank {} ({}) excluded: {}", round, rej.rank, (*group)[rej.rank],
                      rej.detail));
    }
    outer_->Step(global_, agg->mean);
    const std::uint64_t tokens_per =
        static_cast<std::uint64_t>(o_.inner_steps) * o_.batch * o_.seq_len;
    run_tokens_ += tokens_per * agg->accepted.size();
    if (std::find(agg->accepted.begin(), agg->accepted.end(), static_cast<std::uint32_t>(rank)) !=
        agg->accepted.end()) {
      report_.tokens += tokens_per;
      ++report_.rounds_contributed;
    }
    last_group_ = *group;
    bool evicted = false, donor = false;
    if (auto h = CheckHashes(round, *group, rank, evicted, donor); !h) return h.error();
    if (evicted) {
      if (auto s = Resync(); !s) return s.error();
      return false;
    }
    if (donor) {
      if (auto d = Donate(round, *group); !d) return d.error();
      // Every member has passed its collective and its hash: the round's rendezvous and
      // arrival keys are no longer read (the groups, hashes and agreed record stay).
      for (int a = 0; a <= attempt; ++a) {
        const std::string base =
            prefix_ + "rounds/" + RoundKey(round) + "/" + std::to_string(a) + "/";
        (void)store_.Delete(base + "gloo/", true);
        (void)store_.Delete(base + "arrive/", true);
      }
    }
    next_round_ = round + 1;
    return true;
  }
}

Result<WorkerReport> Worker::RunDdp() {
  // One group for the whole run, formed like round 0's; then R x H steps, each one all-reduce
  // of the fp32 gradient and one AdamW step; a hash check and the donor's loss every H steps.
  auto live = LiveMembers();
  if (!live) return live.error();
  std::vector<std::string> candidates;
  for (const auto& m : *live) candidates.push_back(m.id);
  Enter(Phase::kWait);
  auto group = CloseGroup(0, 0, candidates, o_.min_deadline_s);
  if (!group) return group.error();
  const auto me = std::find(group->begin(), group->end(), id_);
  if (me == group->end()) return Error::Io("ddp: left out of the group (started late)");
  const int rank = static_cast<int>(me - group->begin());
  const int k = static_cast<int>(group->size());
  auto c = comm_(prefix_ + "rounds/" + RoundKey(0) + "/0/gloo/", rank, k, o_.collective_timeout_s);
  if (!c) return c.error();
  std::vector<float> grad;
  const std::uint64_t tokens_per = static_cast<std::uint64_t>(o_.batch) * o_.seq_len;
  for (int round = 0; round < o_.rounds; ++round) {
    for (int s = 0; s < o_.inner_steps; ++s) {
      Enter(Phase::kCompute);
      model_->Gradient(sampler_->Next(), grad);
      Enter(Phase::kCommunicate);
      if (auto a = (*c)->AllReduceSum(grad); !a) return a.error();
      Enter(Phase::kCompute);
      const float inv = 1.0f / static_cast<float>(k);
      for (auto& g : grad) g *= inv;
      model_->ApplyGradient(grad);
      run_tokens_ += tokens_per * k;
      report_.tokens += tokens_per;
      if (auto ka = KeepAlive(); !ka) return ka.error();
    }
    model_->GetParameters(global_);
    bool evicted = false, donor = false;
    if (auto h = CheckHashes(round, *group, rank, evicted, donor); !h) return h.error();
    if (evicted) return Error::Io(fmt::format("ddp: my model differs after round {}", round));
    if (donor) {
      if (auto d = Donate(round, *group); !d) return d.error();
    }
    ++report_.rounds_contributed;
    report_.rounds_done = round + 1;
  }
  report_.traffic = (*c)->traffic();
  return report_;
}

Result<WorkerReport> Worker::Run() {
  start_s_ = clock_.now_s();
  phase_start_ = start_s_;
  phase_cpu_ = clock_.cpu_s();
  report_.name = o_.name.empty() ? fmt::format("worker-{}", getpid()) : o_.name;
  report_.mode = o_.mode;
  if (o_.mode != "diloco" && o_.mode != "ddp") {
    return Error::Usage("--mode: '" + o_.mode + "' is not diloco or ddp");
  }
  if (o_.inner_steps < 1 || o_.rounds < 1 || o_.batch < 1 || o_.seq_len < 1) {
    return Error::Usage("--inner-steps, --rounds, --batch and --seq-len must be at least 1");
  }
  lm::ModelConfig config;
  try {
    config = lm::ModelByName(o_.model);
  } catch (const std::invalid_argument& e) {
    return Error::Usage(e.what());
  }
  if (o_.seq_len > config.max_seq_len) {
    return Error::Usage(fmt::format("--seq-len {} is longer than model {}'s {}", o_.seq_len,
                                    o_.model, config.max_seq_len));
  }
  if (o_.key.empty()) o_.key.assign(o_.run.begin(), o_.run.end());
  model_ = std::make_unique<lm::ByteLm>(config, o_.adamw, o_.seed, o_.threads);
  threads_ = o_.threads;
  outer_ = std::make_unique<OuterSgd>(o_.outer);
  val_batches_ = lm::ValidationBatches(corpus_.val, o_.val_windows, 16, o_.seq_len);
  if (!o_.init_parameters.empty()) {
    if (o_.init_parameters.size() != model_->parameter_count()) {
      return Error::Usage(fmt::format("the starting checkpoint has {} parameters; model {} has {}",
                                      o_.init_parameters.size(), o_.model,
                                      model_->parameter_count()));
    }
    model_->SetParameters(o_.init_parameters);
  }
  model_->GetParameters(global_);
  if (auto s = CheckConfig(); !s) return s.error();
  if (auto s = Register(); !s) return s.error();
  auto started = RunStarted();
  if (!started) return started.error();
  // Each worker draws its own batches: the stream is its name's (FNV-1a), so a run whose workers
  // are named (as `diloco local` names them) draws the same data every time; an unnamed worker's
  // stream is its member id (unique in the run).
  std::uint64_t stream = static_cast<std::uint64_t>(lease_);
  if (!o_.name.empty()) {
    stream = 1469598103934665603ULL;
    for (unsigned char ch : o_.name) stream = (stream ^ ch) * 1099511628211ULL;
  }
  sampler_ =
      std::make_unique<lm::BatchSampler>(corpus_.train, o_.batch, o_.seq_len, o_.seed, stream);
  if (o_.mode == "ddp") {
    if (*started) return Error::Usage("ddp: the run '" + o_.run + "' has already started");
    if (auto p = PublishMember(0); !p) return p.error();
    if (auto w = WaitForStart(); !w) return w.error();
    auto r = RunDdp();
    Enter(Phase::kWait);
    report_.wall_s = clock_.now_s() - start_s_;
    keeper_.reset();
    (void)store_.LeaseRevoke(lease_);
    if (r) return report_;
    return r;
  }
  if (*started) {
    if (auto s = Resync(); !s) return s.error();
  } else {
    if (auto p = PublishMember(0); !p) return p.error();
    if (auto w = WaitForStart(); !w) return w.error();
  }
  while (next_round_ < o_.rounds) {
    if (auto c = PollControl(true); !c) return c.error();
    if (leave_requested_ || paused_) {
      if (auto l = Leave(); !l) return l.error();
      continue;
    }
    auto r = DilocoRound(next_round_);
    if (!r && keeper_ && keeper_->lost()) {
      // My lease lapsed (etcd unreachable for longer than its TTL): the others went on without
      // me. Back in as a new member, through a donor.
      Log(fmt::format("round {}: my lease is gone ({}); registering again", next_round_,
                      r.error().message()));
      if (auto g = Register(); !g) return g.error();
      if (auto j = Resync(); !j) return j.error();
      continue;
    }
    if (!r) return r.error();
    report_.rounds_done = next_round_;
  }
  Enter(Phase::kWait);
  report_.wall_s = clock_.now_s() - start_s_;
  keeper_.reset();
  (void)store_.LeaseRevoke(lease_);
  return report_;
}

}  // namespace

Result<WorkerReport> RunWorker(coord::Store& store, const CommFactory& comm,
                               const lm::Corpus& corpus, const WorkerOptions& options,
                               const WorkerClock& clock) {
  Worker w(store, comm, corpus, options, clock);
  return w.Run();
}

Result<RunSummary> ReadRunSummary(coord::Store& store, const std::string& run) {
  auto r = store.Get(RunPrefix(run) + "rounds/", true);
  if (!r) return Error::Io("rounds: " + r.error().message());
  RunSummary s;
  std::vector<std::string> last;
  for (const auto& kv : r->kvs) {
    if (!kv.key.ends_with("/agreed")) continue;
    auto j = json::parse(kv.value, nullptr, false);
    if (j.is_discarded()) continue;
    ++s.rounds;
    s.rejected += j.value("rejected", 0);
    s.tokens = std::max(s.tokens, j.value("tokens", std::uint64_t{0}));
    auto members = j.value("members", std::vector<std::string>{});
    if (!last.empty() && members != last) ++s.membership_changes;
    last = members;
    if (j.contains("val_loss")) {
      s.loss_curve.push_back({j.value("tokens", std::uint64_t{0}), j["val_loss"].get<double>()});
    }
  }
  // Every round's hashes agreed: each hash under rounds/<r>/hash/ equals that round's agreed one.
  std::map<std::string, std::string> agreed;
  for (const auto& kv : r->kvs) {
    if (kv.key.ends_with("/agreed")) {
      auto j = json::parse(kv.value, nullptr, false);
      if (!j.is_discarded()) agreed[kv.key.substr(0, kv.key.size() - 6)] = j.value("hash", "");
    }
  }
  for (const auto& kv : r->kvs) {
    const auto at = kv.key.find("/hash/");
    if (at == std::string::npos) continue;
    const std::string round = kv.key.substr(0, at + 1);
    if (agreed.count(round) && agreed[round] != kv.value) {
      s.hashes_agreed = false;
      ++s.hash_evictions;
    }
  }
  return s;
}

}  // namespace headroom::dist
