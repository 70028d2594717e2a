#pragma once
// What a donor sends a (re)joining member (docs/DILOCO.md, "Joining and resyncing"): the round
// it enters, the run's tokens so far, the agreed model, the outer momentum and the donor's inner
// optimizer state, as one little-endian blob of 32 + 16 n bytes for n parameters:
//   u64 next_round, u64 run_tokens, i64 schedule_step, i64 adam_step,
//   f32 model[n], f32 momentum[n] (zeros: no outer step taken yet), f32 exp_avg[n],
//   f32 exp_avg_sq[n].
// The joiner checks the model's SHA-256 against the round's agreed record before it believes
// any of it (diloco/worker.cc).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/error.h"
#include "diloco/accounting.h"
#include "diloco/model.h"
#include "diloco/round_group.h"
#include "diloco_comm/communicator.h"

namespace headroom::diloco {

struct RunState {
  int next_round = 0;
  std::uint64_t run_tokens = 0;
  std::vector<float> model;
  std::vector<float> momentum;  // empty, or all zeros: the outer optimizer has not stepped
  OptimizerState inner;
};

std::size_t StateBytes(std::size_t parameters);
// REQUIRES: inner's moments and a non-empty momentum have model.size() values.
std::vector<std::uint8_t> EncodeState(const RunState& state);
// An error when the blob is not StateBytes(parameters) long.
Result<RunState> DecodeState(std::span<const std::uint8_t> blob, std::size_t parameters);

// The donor's side, after it recorded round `round` as agreed: answers every pending request
// under joins/ with a rendezvous (joins/<id>/serve) and broadcasts `blob` to it over a group
// of two; a joiner that fails to connect or to receive is logged and its request deleted (it
// asks again). `keep_alive` renews my lease before each connection (it may take the timeout).
Status ServeJoins(const RunMember& me, int round, std::span<const std::uint8_t> blob,
                  const CommFactory& comm, double timeout_s, Accounting& accounting,
                  TrafficCounters& traffic, const std::function<Status(bool force)>& keep_alive);

// The joiner's side: asks for the run's state (joins/<me>) and waits for a donor to serve it;
// what it receives is believed only when its model hashes to the one recorded for its round.
// `ended` when the run's last round (last_round) was agreed before anyone served me.
struct Joined {
  bool ended = false;
  int round = -1;  // the agreed round whose state I hold
  RunState state;
};
Result<Joined> AwaitDonor(const RunMember& me, int last_round, std::size_t parameters,
                          const CommFactory& comm, double timeout_s, Accounting& accounting,
                          TrafficCounters& traffic,
                          const std::function<Status(bool force)>& keep_alive);

}  // namespace headroom::diloco
