#pragma once
// A model small enough for the round protocol's in-process tests (dist/model.h): linear
// regression of y = w*.x + noise over kParameters features, mean squared error, trained by Adam.
// Every worker's batches come from its own stream; the validation set is fixed. Deterministic
// (std::mt19937_64 and float arithmetic in a fixed order), so models built alike hold the same
// bits, as the round's hash check needs. An inner step can cost simulated time (`step_cost`):
// the tests' stragglers.
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "diloco/model.h"

namespace headroom::diloco::testing {

class TinyModel final : public Model {
 public:
  static constexpr std::size_t kParameters = 300;  // more than one int8 block (256)
  static constexpr int kBatch = 128;
  static constexpr int kValidation = 64;

  // seed: the initial parameters, the true weights and the validation set; step_cost: called
  // once per inner step (a simulated clock's sleep), may be empty.
  TinyModel(std::uint64_t seed, double lr, std::function<void()> step_cost)
      : seed_(seed), lr_(lr), step_cost_(std::move(step_cost)) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    truth_.resize(kParameters);
    for (float& w : truth_) w = normal(rng);
    w_.resize(kParameters);
    for (float& w : w_) w = 0.1f * normal(rng);
    m_.assign(kParameters, 0.0f);
    v_.assign(kParameters, 0.0f);
    val_x_.resize(static_cast<size_t>(kValidation) * kParameters);
    val_y_.resize(kValidation);
    Draw(rng, val_x_, val_y_);
  }

  std::size_t parameter_count() const override { return kParameters; }
  std::uint64_t tokens_per_step() const override { return kBatch; }
  void SetDataStream(std::uint64_t stream) override { data_.seed(seed_ * 7919 + stream); }

  double TrainStep() override {
    std::vector<float> g;
    const double loss = Gradient(g);
    ApplyGradient(g);
    return loss;
  }

  double Gradient(std::vector<float>& grad) override {
    if (step_cost_) step_cost_();
    std::vector<float> x(static_cast<size_t>(kBatch) * kParameters), y(kBatch);
    Draw(data_, x, y);
    grad.assign(kParameters, 0.0f);
    double loss = 0;
    for (int b = 0; b < kBatch; ++b) {
      const float* xb = &x[static_cast<size_t>(b) * kParameters];
      const float err = Dot(xb, w_) - y[static_cast<size_t>(b)];
      loss += 0.5 * err * err;
      for (std::size_t i = 0; i < kParameters; ++i) grad[i] += err * xb[i] / kBatch;
    }
    return loss / kBatch;
  }

  void ApplyGradient(std::span<const float> g) override {
    ++step_;
    const float b1 = 0.9f, b2 = 0.99f, eps = 1e-8f;
    const float c1 = 1.0f - std::pow(b1, static_cast<float>(step_));
    const float c2 = 1.0f - std::pow(b2, static_cast<float>(step_));
    for (std::size_t i = 0; i < kParameters; ++i) {
      m_[i] = b1 * m_[i] + (1 - b1) * g[i];
      v_[i] = b2 * v_[i] + (1 - b2) * g[i] * g[i];
      w_[i] -= static_cast<float>(lr_) * (m_[i] / c1) / (std::sqrt(v_[i] / c2) + eps);
    }
  }

  double ValidationLoss() override {
    double loss = 0;
    for (int b = 0; b < kValidation; ++b) {
      const float err =
          Dot(&val_x_[static_cast<size_t>(b) * kParameters], w_) - val_y_[static_cast<size_t>(b)];
      loss += 0.5 * err * err;
    }
    return loss / kValidation;
  }

  void GetParameters(std::vector<float>& out) const override { out = w_; }
  void SetParameters(std::span<const float> values) override {
    w_.assign(values.begin(), values.end());
  }
  OptimizerState GetOptimizerState() const override { return {step_, step_, m_, v_}; }
  Status SetOptimizerState(const OptimizerState& s) override {
    if (s.exp_avg.size() != kParameters || s.exp_avg_sq.size() != kParameters) {
      return Error::Usage("tiny model: optimizer state of another size");
    }
    step_ = s.adam_step;
    m_ = s.exp_avg;
    v_ = s.exp_avg_sq;
    return OkStatus();
  }
  void SetThreads(int threads) override { threads_ = threads; }
  int threads() const { return threads_; }

 private:
  static float Dot(const float* x, const std::vector<float>& w) {
    float s = 0;
    for (std::size_t i = 0; i < kParameters; ++i) s += x[i] * w[i];
    return s;
  }
  // Samples: x ~ N(0, 1), y = truth.x + N(0, 0.1).
  void Draw(std::mt19937_64& rng, std::vector<float>& x, std::vector<float>& y) const {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : x) v = normal(rng);
    for (std::size_t b = 0; b < y.size(); ++b) {
      y[b] = Dot(&x[b * kParameters], truth_) + 0.1f * normal(rng);
    }
  }

  const std::uint64_t seed_;
  const double lr_;
  std::function<void()> step_cost_;
  std::vector<float> truth_, w_, m_, v_, val_x_, val_y_;
  std::int64_t step_ = 0;
  std::mt19937_64 data_;
  int threads_ = 1;
};

}  // namespace headroom::diloco::testing
