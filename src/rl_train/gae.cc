#include "rl_train/gae.h"

#include <cassert>

namespace headroom::rl {

void Gae(std::span<const double> rewards, std::span<const double> values,
         std::span<const double> next_values, std::span<const unsigned char> cut, double gamma,
         double lambda, std::span<double> advantages, std::span<double> returns) {
  const size_t n = rewards.size();
  assert(values.size() == n && next_values.size() == n && cut.size() == n);
  assert(advantages.size() == n && returns.size() == n);
  double next_advantage = 0.0;
  for (size_t t = n; t-- > 0;) {
    const bool boundary = cut[t] != 0 || t + 1 == n;
    const double next_v = boundary ? next_values[t] : values[t + 1];
    if (boundary) next_advantage = 0.0;
    const double delta = rewards[t] + gamma * next_v - values[t];
    advantages[t] = delta + gamma * lambda * next_advantage;
    returns[t] = advantages[t] + values[t];
    next_advantage = advantages[t];
  }
}

}  // namespace headroom::rl
