#pragma once
// DiLoCo's outer optimizer: SGD with Nesterov momentum on the averaged pseudo-gradient
// g = global - mean(local) (as PyTorch's SGD(nesterov=True)): b <- mu b + g (b = g on the first
// step), global <- global - lr (g + mu b). Element-wise in float: the same inputs give the same
// bits on every member.
#include <span>
#include <vector>

namespace headroom::diloco {

struct OuterOptions {
  double lr = 0.7;
  double momentum = 0.9;
};

class OuterSgd {
 public:
  explicit OuterSgd(OuterOptions options) : options_(options) {}
  void Step(std::span<float> global, std::span<const float> pseudo_gradient);
  // The step on one slice of the model (a streaming fragment): global and pseudo_gradient are
  // values [offset, offset + size) of a model of `total`; the momentum of the rest is untouched
  // (zero until its slice's first step, which makes b = g there as in Step).
  void StepSlice(std::span<float> global, std::span<const float> pseudo_gradient,
                 std::size_t offset, std::size_t total);
  const std::vector<float>& momentum() const { return buffer_; }
  void set_momentum(std::vector<float> buffer) { buffer_ = std::move(buffer); }
  bool started() const { return !buffer_.empty(); }

 private:
  OuterOptions options_;
  std::vector<float> buffer_;
};

}  // namespace headroom::diloco
