#pragma once
// A DiLoCo run's arithmetic in one process, for a given membership per round (docs/DILOCO.md,
// "Replaying a membership"): the workers that train round r are the first members[r] of
// `workers`, each with its own model replica from the factory (its inner optimizer), data
// stream (named as `diloco local` names its workers) and error feedback; their int8
// pseudo-gradients are sealed, screened and averaged by the worker's own functions (AggregateRound)
// and the outer Nesterov step taken; a worker that missed a round starts from the run's model and a
// donor's inner AdamW state, as a resync does. No etcd, no Gloo: the same numbers as a real run
// with that membership, without the network. Deterministic for a seed. What the loss of a run on
// spare power is, against the same run on dedicated workers (every member every round).
#include <functional>
#include <vector>

#include "common/error.h"
#include "diloco/model.h"
#include "diloco/worker.h"

namespace headroom::diloco {

struct ReplayOptions {
  WorkerOptions worker;      // H, outer, codec, screen, key, eval_every
  int workers = 4;           // replicas
  std::vector<int> members;  // per round, 1..workers; its size is the rounds
};

struct ReplayResult {
  int rounds = 0;
  std::uint64_t tokens = 0;
  double final_val_loss = 0.0;
  std::vector<LossPoint> loss_curve;  // after every eval_every rounds, and the last
  int resyncs = 0;
};

Result<ReplayResult> ReplayRun(const ModelFactory& model, const ReplayOptions& options,
                               const std::function<void(int done, int total)>& progress);

// "round,workers" rows (a header, then one row per round from 0): a membership schedule, as
// `headroom sites-sim --schedule-dir` writes it. Errors name the file, line and field.
Result<std::vector<int>> ParseMembershipSchedule(std::string_view text, std::string_view name);

}  // namespace headroom::diloco
