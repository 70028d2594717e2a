// Generalised advantage estimation (Schulman et al. 2016) for cuts of an endless task.
//
// There are no terminal states: where an episode is cut (and at the end of the batch) the value of
// the next observation is bootstrapped, and the recursion does not carry across the cut.
//   delta_t = r_t + gamma V(s_{t+1}) - V(s_t)
//   A_t = delta_t + gamma lambda A_{t+1}   (A_{t+1} = 0 after a cut)
//   R_t = A_t + V(s_t)                      (the value target)
#pragma once

#include <span>

namespace headroom::rl {

// One environment's trajectory of n steps. cut[t]: the episode was cut after step t, and
// next_value[t] is V of the observation that followed (used only where cut[t] or t = n-1; the
// caller sets cut[n-1]'s next value to V(current observation)).
// REQUIRES: all spans of size n; advantages and returns of size n.
void Gae(std::span<const double> rewards, std::span<const double> values,
         std::span<const double> next_values, std::span<const unsigned char> cut, double gamma,
         double lambda, std::span<double> advantages, std::span<double> returns);

}  // namespace headroom::rl
