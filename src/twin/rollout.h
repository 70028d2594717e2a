// One rollout engine (a vLLM-like server on a tensor-parallel group): the sequences of a GRPO
// rollout, admitted up to the concurrency limit and the KV capacity, decoded together.
//
// Continuous admission (vLLM's scheduler): occupancy n(t) = min(concurrency limit, sequences
// not yet finished, KV capacity); a sequence is admitted as soon as one finishes. Chunked
// admission (a trainer that submits `concurrency` sequences and waits for all of them: TRL's
// llm.generate over chunks, verl's driver chunks, OpenRLHF's ray.wait per chunk): a chunk of
// min(concurrency, KV capacity, sequences left) is admitted only when nothing is in flight, so
// occupancy falls inside each chunk as its sequences finish and the chunk waits for its
// longest; the limit read at a chunk's start holds for that chunk. Either way admission
// happens at the start of a tick.
//
// Every sequence in flight advances by the same number of tokens per tick (the engine's
// throughput at n, shared), so a sequence finishes when the engine's cumulative per-sequence
// progress reaches its admission mark plus its length: a min-heap of finish marks makes a tick
// O(1) plus O(log n) per finished sequence, with no allocation once the heap has grown.
//
// Not thread-safe: one owner.
#pragma once

#include <cstdint>
#include <optional>
#include <queue>
#include <string_view>
#include <vector>

#include "twin/curves.h"

namespace headroom::twin {

// How an engine admits a rollout's sequences (scenario key rollout.admission).
enum class Admission {
  kContinuous,  // a new sequence as soon as one finishes (the default)
  kChunked,     // a chunk at a time: the next only when every sequence of the last is done
};
// "continuous", "chunked".
std::string_view AdmissionName(Admission admission);
// The admission of that name; nullopt for any other text.
std::optional<Admission> ParseAdmission(std::string_view name);

struct EngineRates {
  const DecodeCurves* decode = nullptr;
  double prefill_tokens_per_s = 0.0;
  double prefill_power_w = 0.0;
  // Slowdown (time factor >= 1) and drawn power of a phase at full-clock power p under the
  // power limit in force; identity without a limit.
  double power_limit_w = 0.0;  // 0: none
  const ClockCurve* clock = nullptr;
};

class RolloutEngine {
 public:
  explicit RolloutEngine(Admission admission = Admission::kContinuous) : admission_(admission) {}

  // Starts a rollout. REQUIRES: done(). `lengths` are completion lengths in tokens;
  // each admitted sequence adds `prefill_tokens_per_sequence` of prompt work.
  void Start(std::vector<double> lengths, double prefill_tokens_per_sequence);
  // Drops what is left of the rollout (a trainer that began its next one): done() after.
  void Abandon();

  struct Tick {
    double tokens = 0.0;     // tokens generated in the tick
    double power_w = 0.0;    // mean target power per GPU of the engine over the tick
    double occupancy = 0.0;  // sequences in flight during the tick
  };
  // Advances by dt_s under a concurrency limit and a KV capacity (in sequences). Admission
  // happens first, by the engine's Admission.
  Tick Advance(double dt_s, int concurrency, int kv_capacity, const EngineRates& rates);
  // dt_s of decode with `in_flight` sequences throughout, none admitted or finished: a real
  // trainer's rollout whose in-flight count it reports (the twin following it). Prefill is not
  // modelled here (the trainer's reports do not say when it admits).
  static Tick Steady(double dt_s, double in_flight, const EngineRates& rates);

  bool done() const { return next_ == lengths_.size() && in_flight_.empty(); }
  size_t in_flight() const { return in_flight_.size(); }
  size_t sequences() const { return lengths_.size(); }
  size_t finished() const { return next_ - in_flight_.size(); }
  Admission admission() const { return admission_; }

 private:
  // Admits sequences up to `limit` in flight (continuous), or a chunk of up to `limit` when
  // none is in flight (chunked).
  void Admit(size_t limit);

  Admission admission_;  // constant after construction
  std::vector<double> lengths_;
  size_t next_ = 0;  // first sequence not yet admitted
  std::priority_queue<double, std::vector<double>, std::greater<>> in_flight_;  // finish marks
  double progress_ = 0.0;  // tokens each in-flight sequence has advanced since the start
  double prefill_queue_tokens_ = 0.0;
  double prefill_per_sequence_ = 0.0;
};

}  // namespace headroom::twin
