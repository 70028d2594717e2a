#include "rl/actor_critic.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numeric>

namespace headroom::rl {

void LogSoftmax(const double* z, int k, double* out) {
  double m = z[0];
  for (int j = 1; j < k; ++j) m = std::max(m, z[j]);
  double s = 0.0;
  for (int j = 0; j < k; ++j) s += std::exp(z[j] - m);
  const double log_sum = m + std::log(s);
  for (int j = 0; j < k; ++j) out[j] = z[j] - log_sum;
}

ActorCritic::ActorCritic(int obs_dims, std::vector<int> heads, std::vector<int> hidden,
                         uint64_t seed)
    : heads_(std::move(heads)) {
  assert(obs_dims > 0);
  std::vector<int> a{obs_dims};
  a.insert(a.end(), hidden.begin(), hidden.end());
  std::vector<int> c = a;
  a.push_back(std::accumulate(heads_.begin(), heads_.end(), 0));
  c.push_back(1);
  actor_ = Mlp(a);
  critic_ = Mlp(c);
  std::mt19937_64 rng(seed);
  actor_.InitOrthogonal(rng, std::sqrt(2.0), 0.01);
  critic_.InitOrthogonal(rng, std::sqrt(2.0), 1.0);
}

double LogProb(const std::vector<int>& heads, const double* logits, const int* actions) {
  double lp = 0.0;
  double buf[64];
  for (size_t h = 0; h < heads.size(); ++h) {
    assert(heads[h] <= 64);
    LogSoftmax(logits, heads[h], buf);
    lp += buf[actions[h]];
    logits += heads[h];
  }
  return lp;
}

void Argmax(const std::vector<int>& heads, const double* logits, int* actions) {
  for (size_t h = 0; h < heads.size(); ++h) {
    actions[h] = static_cast<int>(std::max_element(logits, logits + heads[h]) - logits);
    logits += heads[h];
  }
}

double Sample(const std::vector<int>& heads, const double* logits, std::mt19937_64& rng,
              int* actions) {
  double lp = 0.0;
  double buf[64];
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (size_t h = 0; h < heads.size(); ++h) {
    LogSoftmax(logits, heads[h], buf);
    const double u = uniform(rng);
    double c = 0.0;
    int a = heads[h] - 1;
    for (int j = 0; j < heads[h]; ++j) {
      c += std::exp(buf[j]);
      if (u < c) {
        a = j;
        break;
      }
    }
    actions[h] = a;
    lp += buf[a];
    logits += heads[h];
  }
  return lp;
}

}  // namespace headroom::rl
