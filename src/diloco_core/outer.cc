#include "diloco_core/outer.h"

#include <cassert>

namespace headroom::diloco {

void OuterSgd::Step(std::span<float> global, std::span<const float> g) {
  assert(global.size() == g.size());
  const float mu = static_cast<float>(options_.momentum);
  const float lr = static_cast<float>(options_.lr);
  if (buffer_.empty()) {
    buffer_.assign(g.begin(), g.end());
  } else {
    assert(buffer_.size() == g.size());
    for (std::size_t i = 0; i < g.size(); ++i) buffer_[i] = mu * buffer_[i] + g[i];
  }
  for (std::size_t i = 0; i < g.size(); ++i) global[i] -= lr * (g[i] + mu * buffer_[i]);
}

void OuterSgd::StepSlice(std::span<float> global, std::span<const float> g, std::size_t offset,
                         std::size_t total) {
  assert(global.size() == g.size() && offset + g.size() <= total);
  const float mu = static_cast<float>(options_.momentum);
  const float lr = static_cast<float>(options_.lr);
  if (buffer_.empty()) buffer_.assign(total, 0.0f);
  assert(buffer_.size() == total);
  for (std::size_t i = 0; i < g.size(); ++i) {
    float& b = buffer_[offset + i];
    b = mu * b + g[i];
    global[i] -= lr * (g[i] + mu * b);
  }
}

}  // namespace headroom::diloco
