#include "diloco/worker.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "coord/lease.h"
#include "coord/lease_keeper.h"
#include "diloco/recovery.h"
#include "diloco/worker_impl.h"
#include "diloco_core/digest.h"

namespace headroom::diloco {

using nlohmann::json;

Result<Hostility> ParseHostility(const std::string& name) {
  if (name == "none") return Hostility::kNone;
  if (name == "scale") return Hostility::kScale;
  if (name == "flip") return Hostility::kFlip;
  if (name == "nan") return Hostility::kNan;
  if (name == "forge") return Hostility::kForge;
  return Error::Usage("--hostile: '" + name + "' is not one of none, scale, flip, nan, forge");
}

std::uint64_t NameStream(std::string_view name) {
  std::uint64_t stream = 1469598103934665603ULL;
  for (unsigned char ch : name) stream = (stream ^ ch) * 1099511628211ULL;
  return stream;
}

namespace internal {

Status Worker::Register() {
  if (auto granted = lease_.Grant(clock_.now_s()); !granted) {
    return Error::Io("register: " + granted.error().message());
  }
  keeper_.reset();
  me_.lease = lease_.id();
  me_.id = Hex64(me_.lease);
  if (o_.renew_in_background) {
    keeper_ = std::make_unique<coord::LeaseKeeper>(store_, me_.lease, lease_.renew_after_s());
  }
  report_.member = me_.id;
  return OkStatus();
}

std::string Worker::ConfigJson() const {
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
  if (o_.aggregate != Aggregation::kTrimmedMean) c["aggregate"] = AggregationName(o_.aggregate);
  if (o_.stream_fragments > 1) c["stream_fragments"] = o_.stream_fragments;
  if (!o_.init_parameters.empty()) c["init"] = Hex(Sha256Floats(o_.init_parameters));
  return c.dump();
}

Status Worker::WaitForStart() {
  const double until = clock_.now_s() + o_.min_deadline_s;
  while (clock_.now_s() < until) {
    auto m = LiveMembers(store_, me_.prefix);
    if (!m) return m.error();
    if (static_cast<int>(m->size()) >= o_.start_workers) break;
    if (auto s = Sleep(); !s) return s;
  }
  return OkStatus();
}

// control/<name>: {"threads": N, "duty": D, "leave": B}, read at most every kControlPollS
// between inner steps. threads: the model's; duty in (0, 1]: after a step of d seconds the
// worker idles d (1 - D) / D; leave: at the next round boundary it stops being a candidate
// (the others do not wait for it) until leave is false again, then rejoins through a donor.
Status Worker::PollControl(bool force) {
  const double now = clock_.now_s();
  if (!force && now - control_read_s_ < kControlPollS) {
    ApplyGrant();
    return OkStatus();
  }
  control_read_s_ = now;
  auto r = store_.Get(me_.prefix + "control/" + report_.name);
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
      model_->SetThreads(t);
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
    model_->TrainStep();
    const double step_s = clock_.now_s() - t0;
    if (auto k = KeepAlive(); !k) return k;
    if (auto c = PollControl(false); !c) return c;
    // Paused: no idle for the step's share (the wait for watts is the next step's, or the
    // round boundary's, which leaves the run).
    if (duty_ < 1.0 && !paused_) {
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
  RestartStream();
  Enter(Phase::kThrottled);
  if (auto p = Publish(-1); !p) return p;
  Log(fmt::format("left before round {} ({})", next_round_,
                  paused_ ? "no power granted" : "asked to"));
  ++report_.leaves;
  while (leave_requested_ || paused_) {
    auto last = store_.Get(me_.prefix + "rounds/" + RoundKey(o_.rounds - 1) + "/agreed");
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
  auto mine = store_.Get(me_.prefix + "rounds/" + RoundKey(next_round_) + "/agreed");
  if (!mine) return Error::Io("leave: " + mine.error().message());
  if (mine->kvs.empty()) {
    Log(fmt::format("back before round {}: nothing agreed while I was out", next_round_));
    return Publish(next_round_);
  }
  return Resync();
}

// What a donor sends (recovery.h): the round, the run's tokens, the model, the outer momentum
// and its own inner optimizer state.
RunState Worker::State() const {
  RunState s;
  s.next_round = next_round_;
  s.run_tokens = run_tokens_;
  s.model = global_;
  if (outer_->started()) s.momentum = outer_->momentum();
  s.inner = model_->GetOptimizerState();
  return s;
}

Status Worker::CheckHashes(int round, const std::vector<std::string>& group, int my_rank,
                           bool& evicted, bool& donor) {
  Enter(Phase::kWait);
  const std::string mine = Hex(Sha256Floats(global_));
  auto v = ExchangeHashes(me_, round, group, my_rank, mine, o_.collective_timeout_s);
  if (!v) return v.error();
  if (!v->agreed) {
    report_.hashes_agreed = false;
    report_.evictions += v->disagreeing;
  }
  evicted = v->evicted;
  donor = v->donor;
  if (evicted)
    Log(fmt::format("round {}: my hash {} is not the round's {}: evicted", round,
                    mine.substr(0, 12), v->majority.substr(0, 12)));
  return OkStatus();
}

Status Worker::Donate(int round, const std::vector<std::string>& group) {
  json agreed = {{"round", round},
                 {"hash", Hex(Sha256Floats(global_))},
                 {"members", group},
                 {"tokens", run_tokens_},
                 {"rejected", last_rejected_}};
  // The validation loss is compute: not while the grant allows none (fail closed; the record
  // goes without it, and the next donor with watts measures it).
  ApplyGrant();
  if (paused_) {
    Log(fmt::format("round {}: validation skipped: no power granted", round));
  } else if (o_.eval_every > 0 && (round % o_.eval_every == 0 || round + 1 == o_.rounds)) {
    Enter(Phase::kCompute);
    model_->GetParameters(local_);  // streaming goes on from it
    model_->SetParameters(global_);
    const double loss = model_->ValidationLoss();
    model_->SetParameters(local_);
    agreed["val_loss"] = loss;
    report_.loss_curve.push_back({run_tokens_, loss, round, accounting_.elapsed_s()});
    report_.final_val_loss = loss;
    if (round + 1 == o_.rounds) report_.final_params = global_;
    Enter(Phase::kWait);
  }
  // Once per round (create-if-absent): a member that judged the round without a hash that
  // arrived late may also think itself the donor; the first record stands.
  const std::string key = me_.prefix + "rounds/" + RoundKey(round) + "/agreed";
  coord::TxnRequest t;
  t.compare.push_back(coord::Compare::CreateRevision(key, coord::Compare::Result::kEqual, 0));
  t.success.push_back(coord::Op::Put(key, agreed.dump()));
  auto written = store_.Txn(t);
  if (!written) return Error::Io("agreed: " + written.error().message());
  if (!written->succeeded) Log(fmt::format("round {}: already agreed by another donor", round));
  return ServeJoins(me_, round, EncodeState(State()), comm_, o_.collective_timeout_s, accounting_,
                    report_.traffic, [this](bool force) { return KeepAlive(force); });
}

// Fetches the last agreed model and outer state from that round's donor (recovery.h).
Status Worker::Resync() {
  RestartStream();
  Enter(Phase::kRecover);
  ++report_.resyncs;
  if (auto p = Publish(-1); !p) return p;
  auto joined =
      AwaitDonor(me_, o_.rounds - 1, global_.size(), comm_, o_.collective_timeout_s, accounting_,
                 report_.traffic, [this](bool force) { return KeepAlive(force); });
  if (!joined) return joined.error();
  if (joined->ended) {
    next_round_ = o_.rounds;
    return OkStatus();
  }
  RunState& s = joined->state;
  run_tokens_ = s.run_tokens;
  global_ = std::move(s.model);
  outer_ = std::make_unique<OuterSgd>(o_.outer);
  if (!s.momentum.empty()) outer_->set_momentum(std::move(s.momentum));
  next_round_ = joined->round + 1;
  model_->SetParameters(global_);
  // The donor's inner state: my first round is an ordinary one.
  if (auto st = model_->SetOptimizerState(s.inner); !st) return st;
  error_.assign(global_.size(), 0.0f);
  if (auto p = Publish(next_round_); !p) return p;
  Log(fmt::format("joined at round {} (hash {} checked)", next_round_,
                  Hex(Sha256Floats(global_)).substr(0, 12)));
  return OkStatus();
}

// One outer round: H inner steps, then the group, the all-gather, the screen, the outer step
// and the hash check; attempts again without whoever broke a collective. Returns false when I
// am not in the round's result (left out, evicted) and have resynced.
Result<bool> Worker::DilocoRound(int round) {
  if (o_.stream_fragments <= 1 || stream_restart_) model_->SetParameters(global_);
  stream_restart_ = false;
  const double t0 = clock_.now_s();
  if (auto s = TrainRound(round); !s) return s.error();
  const double compute_s = clock_.now_s() - t0;
  model_->GetParameters(local_);
  // The round's own exchange: the whole model, or streaming's last fragment.
  const Fragment slice = fragments_.back();
  std::vector<float> delta(slice.size());
  for (std::size_t i = 0; i < delta.size(); ++i) {
    delta[i] = global_[slice.begin + i] - local_[slice.begin + i];
  }
  if (o_.hostility != Hostility::kNone && round >= o_.hostile_from_round) Corrupt(delta);
  const std::vector<float> error_before = error_;

  std::vector<std::string> candidates;
  auto live = LiveMembers(store_, me_.prefix);
  if (!live) return live.error();
  for (const auto& m : *live) {
    if (m.joined_round >= 0 && m.joined_round <= round) candidates.push_back(m.id);
  }
  for (int attempt = 0;; ++attempt) {
    Enter(Phase::kWait);
    const double deadline = std::max(o_.min_deadline_s, o_.deadline_factor * compute_s);
    auto group = CloseGroup(me_, round, attempt, candidates, deadline);
    if (!group) return group.error();
    const auto me = std::find(group->begin(), group->end(), me_.id);
    if (me == group->end()) {
      Log(fmt::format("round {}: left out of the group (arrived after it closed)", round));
      if (auto s = Resync(); !s) return s.error();
      return false;
    }
    const int rank = static_cast<int>(me - group->begin());
    if (attempt == 0 && !last_group_.empty() && *group != last_group_) ++report_.membership_changes;
    Enter(Phase::kCommunicate);
    error_ = error_before;
    std::vector<std::uint64_t> members;
    for (const auto& g : *group) members.push_back(std::stoull(g, nullptr, 16));
    std::vector<std::uint8_t> key = o_.key;
    if (o_.hostility == Hostility::kForge && round >= o_.hostile_from_round) {
      key.push_back(0x5a);  // signs with a key that is not the run's
    }
    const ExchangeSpec spec{static_cast<std::uint64_t>(round),
                            members,
                            rank,
                            o_.codec,
                            o_.aggregate,
                            o_.screen,
                            key,
                            o_.key};
    const std::string gloo =
        me_.prefix + "rounds/" + RoundKey(round) + "/" + std::to_string(attempt) + "/gloo/";
    if (auto k = KeepAlive(true); !k) return k.error();
    auto c = comm_(gloo, rank, static_cast<int>(group->size()), o_.collective_timeout_s);
    std::string why = c ? "" : c.error().message();
    Result<std::optional<Aggregate>> agg = std::optional<Aggregate>();
    if (c) {
      agg = ExchangeSlice(**c, spec, delta, slice, &why);
      report_.traffic.bytes_sent += (*c)->traffic().bytes_sent;
      report_.traffic.bytes_received += (*c)->traffic().bytes_received;
    }
    if (!agg) return agg.error();
    if (!agg->has_value()) {
      Log(fmt::format("round {} attempt {}: {}; again without whoever is gone", round, attempt,
                      why));
      Enter(Phase::kRecover);
      // The next attempt's candidates: this group's members still alive.
      candidates = *group;
      continue;
    }
    auto applied = ApplyRound(round, attempt, *group, rank, **agg, slice);
    if (applied && *applied && o_.stream_fragments > 1) {
      // The next round's fragments go on this group, while it lasts.
      stream_key_ = key;
      stream_spec_ = spec;
      stream_spec_.key = stream_key_;
      stream_spec_.run_key = o_.key;
      stream_comm_ = std::move(*c);
      stream_counted_ = stream_comm_->traffic();
    }
    return applied;
  }
}

// A hostile worker's contribution (--hostile): scaled, flipped or with a NaN.
void Worker::Corrupt(std::vector<float>& delta) const {
  for (auto& x : delta) {
    if (o_.hostility == Hostility::kScale) x *= kHostileScale;
    if (o_.hostility == Hostility::kFlip) x = -x;
  }
  if (o_.hostility == Hostility::kNan) delta[delta.size() / 2] = std::nanf("");
}

// The attempt's aggregate: the outer step, the hash check;
// the donor's record. False when my hash was evicted (and I have resynced).
Result<bool> Worker::ApplyRound(int round, int attempt, const std::vector<std::string>& group,
                                int rank, const Aggregate& aggregate, Fragment slice) {
  const Aggregate* agg = &aggregate;
  last_rejected_ = static_cast<int>(agg->rejected.size());
  for (const auto& rej : agg->rejected) {
    ++report_.evictions;
    Log(fmt::format("round {}: rank {} ({}) excluded: {}", round, rej.rank, group[rej.rank],
                    rej.detail));
  }
  if (slice.size() == global_.size()) {
    outer_->Step(global_, agg->mean);
  } else {
    outer_->StepSlice(std::span<float>(global_).subspan(slice.begin, slice.size()), agg->mean,
                      slice.begin, global_.size());
    // The round's last fragment, as without streaming: the local one is the global one.
    model_->GetParameters(local_);
    std::copy(global_.begin() + static_cast<std::ptrdiff_t>(slice.begin), global_.end(),
              local_.begin() + static_cast<std::ptrdiff_t>(slice.begin));
    model_->SetParameters(local_);
  }
  const std::uint64_t tokens_per =
      static_cast<std::uint64_t>(o_.inner_steps) * model_->tokens_per_step();
  run_tokens_ += tokens_per * agg->accepted.size();
  if (std::find(agg->accepted.begin(), agg->accepted.end(), static_cast<std::uint32_t>(rank)) !=
      agg->accepted.end()) {
    report_.tokens += tokens_per;
    ++report_.rounds_contributed;
  }
  last_group_ = group;
  bool evicted = false, donor = false;
  if (auto h = CheckHashes(round, group, rank, evicted, donor); !h) return h.error();
  if (evicted) {
    if (auto s = Resync(); !s) return s.error();
    return false;
  }
  if (donor) {
    if (auto d = Donate(round, group); !d) return d.error();
    // Every member has passed its collective and its hash: the round's rendezvous and
    // arrival keys are no longer read (the groups, hashes and agreed record stay).
    for (int a = 0; a <= attempt; ++a) {
      const std::string base =
          me_.prefix + "rounds/" + RoundKey(round) + "/" + std::to_string(a) + "/";
      (void)store_.Delete(base + "gloo/", true);
      (void)store_.Delete(base + "arrive/", true);
    }
  }
  next_round_ = round + 1;
  return true;
}

Result<WorkerReport> Worker::RunDdp() {
  // One group for the whole run, formed like round 0's; then R x H steps, each one all-reduce
  // of the fp32 gradient and one AdamW step; a hash check and the donor's loss every H steps.
  auto live = LiveMembers(store_, me_.prefix);
  if (!live) return live.error();
  std::vector<std::string> candidates;
  for (const auto& m : *live) candidates.push_back(m.id);
  Enter(Phase::kWait);
  auto group = CloseGroup(me_, 0, 0, candidates, o_.min_deadline_s);
  if (!group) return group.error();
  const auto me = std::find(group->begin(), group->end(), me_.id);
  if (me == group->end()) return Error::Io("ddp: left out of the group (started late)");
  const int rank = static_cast<int>(me - group->begin());
  const int k = static_cast<int>(group->size());
  auto c =
      comm_(me_.prefix + "rounds/" + RoundKey(0) + "/0/gloo/", rank, k, o_.collective_timeout_s);
  if (!c) return c.error();
  std::vector<float> grad;
  const std::uint64_t tokens_per = model_->tokens_per_step();
  for (int round = 0; round < o_.rounds; ++round) {
    for (int s = 0; s < o_.inner_steps; ++s) {
      Enter(Phase::kCompute);
      model_->Gradient(grad);
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
  accounting_.Start();
  report_.name = o_.name.empty() ? fmt::format("worker-{}", getpid()) : o_.name;
  report_.mode = o_.mode;
  if (o_.mode != "diloco" && o_.mode != "ddp") {
    return Error::Usage("--mode: '" + o_.mode + "' is not diloco or ddp");
  }
  if (o_.inner_steps < 1 || o_.rounds < 1 || o_.batch < 1 || o_.seq_len < 1) {
    return Error::Usage("--inner-steps, --rounds, --batch and --seq-len must be at least 1");
  }
  if (o_.stream_fragments < 1 || o_.stream_fragments > std::min(kMaxFragments, o_.inner_steps)) {
    return Error::Usage(fmt::format("--stream-fragments: {} is not between 1 and {} (and H)",
                                    o_.stream_fragments, kMaxFragments));
  }
  if (o_.key.empty()) o_.key.assign(o_.run.begin(), o_.run.end());
  auto model = model_factory_();
  if (!model) return model.error();
  model_ = std::move(*model);
  threads_ = o_.threads;
  outer_ = std::make_unique<OuterSgd>(o_.outer);
  if (!o_.init_parameters.empty()) {
    if (o_.init_parameters.size() != model_->parameter_count()) {
      return Error::Usage(fmt::format("the starting checkpoint has {} parameters; model {} has {}",
                                      o_.init_parameters.size(), o_.model,
                                      model_->parameter_count()));
    }
    model_->SetParameters(o_.init_parameters);
  }
  model_->GetParameters(global_);
  fragments_ = Fragments(global_.size(), std::max(1, o_.stream_fragments), kDefaultBlock);
  if (auto s = CheckConfig(store_, me_.prefix, o_.run, ConfigJson()); !s) return s.error();
  if (auto s = Register(); !s) return s.error();
  auto started = RunStarted(store_, me_.prefix);
  if (!started) return started.error();
  // Each worker draws its own batches: the stream is its name's (FNV-1a), so a run whose workers
  // are named (as `diloco local` names them) draws the same data every time; an unnamed worker's
  // stream is its member id (unique in the run).
  model_->SetDataStream(o_.name.empty() ? static_cast<std::uint64_t>(me_.lease)
                                        : NameStream(o_.name));
  if (o_.mode == "ddp") {
    if (*started) return Error::Usage("ddp: the run '" + o_.run + "' has already started");
    if (auto p = Publish(0); !p) return p.error();
    if (auto w = WaitForStart(); !w) return w.error();
    auto r = RunDdp();
    Enter(Phase::kWait);
    report_.wall_s = accounting_.elapsed_s();
    keeper_.reset();
    (void)lease_.Revoke();
    if (r) return report_;
    return r;
  }
  if (*started) {
    if (auto s = Resync(); !s) return s.error();
  } else {
    if (auto p = Publish(0); !p) return p.error();
    if (auto w = WaitForStart(); !w) return w.error();
  }
  while (next_round_ < o_.rounds) {
    if (auto c = PollControl(true); !c) return c.error();
    if (leave_requested_ || paused_) {
      if (auto l = Leave(); !l) return l.error();
      continue;
    }
    auto r = DilocoRound(next_round_);
    if (!r && LeaseGone()) {
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
  report_.wall_s = accounting_.elapsed_s();
  keeper_.reset();
  (void)lease_.Revoke();
  return report_;
}

}  // namespace internal

Result<WorkerReport> RunWorker(coord::Store& store, const CommFactory& comm,
                               const ModelFactory& model, const WorkerOptions& options,
                               const WorkerClock& clock) {
  internal::Worker w(store, comm, model, options, clock);
  return w.Run();
}

}  // namespace headroom::diloco
