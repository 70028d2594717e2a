#pragma once
// A small decoder-only transformer over bytes, trained with libtorch (CPU). lm.cc is the one
// file that includes libtorch: this header is free of it, so the rest of the project compiles
// without torch's headers. The model's parameters travel as one flat float vector in a fixed
// order (parameters() as registered), which is what DiLoCo averages and hashes.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"

namespace headroom::lm {

struct ModelConfig {
  std::string name;     // "tiny" or "small"
  int d_model = 0;      // width
  int layers = 0;       // transformer blocks
  int heads = 0;        // attention heads (d_model divisible by it)
  int max_seq_len = 0;  // positions the model knows
};

// "tiny": 2 x 128 wide, 4 heads, 256 positions (~0.45 M parameters); "small": 4 x 256 wide,
// 8 heads, 256 positions (~3.3 M). Any other name is a Usage error naming it and the models
// there are ("'huge' is not a model (tiny, small)"); the caller says where the name came from.
Result<ModelConfig> ModelByName(const std::string& name);

struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  int warmup_steps = 50;  // linear warm-up of the inner learning rate (then constant)
};

// A batch of token windows: batch x (seq_len + 1) bytes, row-major; inputs are the first
// seq_len of each row, targets the last seq_len.
struct Batch {
  int batch = 0;
  int seq_len = 0;
  std::vector<std::uint8_t> bytes;
};

// The inner AdamW's state, flat in the parameters' order: a joining worker takes its donor's, so
// its first round is an ordinary one (fresh moments would make its first steps sign-like jumps).
struct OptimizerState {
  long schedule_step = 0;      // steps of the learning-rate schedule so far
  std::int64_t adam_step = 0;  // AdamW's own count (bias correction)
  std::vector<float> exp_avg;
  std::vector<float> exp_avg_sq;
};

class ByteLm {
 public:
  // Parameters initialised from seed (the same seed gives the same bits); threads = libtorch's
  // intra-op threads (set process-wide).
  ByteLm(const ModelConfig& config, const AdamWConfig& adamw, std::uint64_t seed, int threads);
  ~ByteLm();
  ByteLm(const ByteLm&) = delete;
  ByteLm& operator=(const ByteLm&) = delete;

  const ModelConfig& config() const;
  std::size_t parameter_count() const;

  // One inner step: forward, mean cross-entropy (nats per byte), backward, gradient clipping
  // at norm 1, AdamW. Returns the loss before the step.
  double TrainStep(const Batch& batch);

  // Forward and backward only: the gradient of the mean loss, flattened (the DDP baseline
  // all-reduces it); ApplyGradient sets it as the gradient and takes the AdamW step.
  double Gradient(const Batch& batch, std::vector<float>& grad_out);
  void ApplyGradient(std::span<const float> grad);

  // Mean cross-entropy in nats per byte over the batch, no gradient.
  double Loss(const Batch& batch);

  void GetParameters(std::vector<float>& out) const;
  void SetParameters(std::span<const float> values);

  // The inner optimizer's moments are dropped (a resynced or joining worker starts them afresh);
  // the learning-rate schedule goes on from `step` (the run's inner steps so far), so a joiner
  // does not warm up again.
  void ResetOptimizer(long step);

  OptimizerState GetOptimizerState() const;
  // Throws std::invalid_argument when the moments do not fit the model.
  void SetOptimizerState(const OptimizerState& state);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// libtorch's intra-op threads (process-wide).
void SetThreads(int threads);

}  // namespace headroom::lm
