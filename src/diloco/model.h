#pragma once
// What a DiLoCo worker trains (docs/DILOCO.md, "The model seam"): a model with its inner
// optimizer and its own stream of data, seen as one flat vector of float parameters (what the
// round averages and hashes). The worker, the replay and the tests know nothing else of it:
// `headroom diloco` gives them the byte-level transformer (diloco_model/lm_model.h, libtorch), the
// in-process tests a model of a few hundred parameters (tests/diloco/tiny_model.h).
//
// Determinism, which the round's hash check relies on: two models built by one factory hold
// the same parameters, and the same calls in the same order leave the same bits.
// Not thread-safe: one worker's thread.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace headroom::diloco {

// The inner optimizer's state, flat in the parameters' order (an Adam-family optimizer: its
// schedule's step, its own step count, two moments). A joining worker takes its donor's, so
// that its first round is an ordinary one.
struct OptimizerState {
  std::int64_t schedule_step = 0;
  std::int64_t adam_step = 0;
  std::vector<float> exp_avg;
  std::vector<float> exp_avg_sq;
};

class Model {
 public:
  virtual ~Model() = default;

  virtual std::size_t parameter_count() const = 0;
  // Tokens one inner step trains on (its batch).
  virtual std::uint64_t tokens_per_step() const = 0;

  // The worker's data: batches from here on come from `stream` (a worker's name's hash, or its
  // member id). REQUIRES: before the first TrainStep or Gradient.
  virtual void SetDataStream(std::uint64_t stream) = 0;

  // One inner step on the stream's next batch (forward, loss, backward, the optimizer's step);
  // the loss before the step.
  virtual double TrainStep() = 0;
  // Forward and backward only, on the next batch: the gradient of the mean loss (the
  // data-parallel baseline all-reduces it); ApplyGradient sets it and takes the step.
  virtual double Gradient(std::vector<float>& grad_out) = 0;
  // REQUIRES: grad has parameter_count() values.
  virtual void ApplyGradient(std::span<const float> grad) = 0;
  // The validation loss (nats per token), no gradient.
  virtual double ValidationLoss() = 0;

  virtual void GetParameters(std::vector<float>& out) const = 0;
  // REQUIRES: values has parameter_count() values.
  virtual void SetParameters(std::span<const float> values) = 0;
  virtual OptimizerState GetOptimizerState() const = 0;
  // Usage error when the moments do not fit the model.
  virtual Status SetOptimizerState(const OptimizerState& state) = 0;

  // Compute threads from the next step on (a worker's control/<name> "threads").
  virtual void SetThreads(int threads) = 0;
};

// Builds one worker's model; the same factory builds the same initial parameters every time. A
// usage error when the options do not describe a model.
using ModelFactory = std::function<Result<std::unique_ptr<Model>>()>;

// The data stream of a worker named `name` (FNV-1a), as `diloco local` names its workers and
// the replay its replicas.
std::uint64_t NameStream(std::string_view name);

}  // namespace headroom::diloco
