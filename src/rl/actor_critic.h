// The actor-critic a policy is: an actor MLP whose outputs are the logits of every factorised
// categorical head side by side, and a critic MLP with one output; and what inference needs of
// it (log-probabilities, argmax, sampling). Inference only: PPO's training is rl_train/ppo.h, in
// its own library (headroom_rl_train), which the live agent does not link.
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <random>
#include <vector>

#include "rl/mlp.h"

namespace headroom::rl {

// Log-softmax of one head's k logits into out.
void LogSoftmax(const double* z, int k, double* out);

class ActorCritic {
 public:
  ActorCritic() = default;
  // REQUIRES: obs_dims > 0, every head > 1.
  ActorCritic(int obs_dims, std::vector<int> heads, std::vector<int> hidden, uint64_t seed);

  int obs_dims() const { return actor_.inputs(); }
  const std::vector<int>& heads() const { return heads_; }
  Mlp& actor() { return actor_; }
  Mlp& critic() { return critic_; }
  const Mlp& actor() const { return actor_; }
  const Mlp& critic() const { return critic_; }

 private:
  std::vector<int> heads_;
  Mlp actor_;
  Mlp critic_;
};

// log softmax of each head's block of `logits`, summed at the chosen actions.
double LogProb(const std::vector<int>& heads, const double* logits, const int* actions);
// The most likely action of each head.
void Argmax(const std::vector<int>& heads, const double* logits, int* actions);
// Samples every head; returns the joint log-probability.
double Sample(const std::vector<int>& heads, const double* logits, std::mt19937_64& rng,
              int* actions);

}  // namespace headroom::rl
