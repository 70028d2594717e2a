// The PPO update and a policy decision. The update matches bench/ppo_update_torch.py: same
// network (the policy's 22 features, 64-64 tanh, heads 5 + 5 + 5), batch 4096, minibatch 512,
// 10 epochs (bench/ppo_compare.sh runs both). BM_PpoUpdate runs the kernels this CPU gets
// (AVX2/FMA where it has them); BM_PpoUpdatePortable the portable build of the same kernels.
#include <benchmark/benchmark.h>

#include <random>

#include "control/features.h"
#include "control/policy.h"
#include "rl_train/ppo.h"

namespace {

using headroom::rl::ActorCritic;

void PpoUpdate(benchmark::State& state, const headroom::rl::kernels::Set& kernels) {
  const int n = 4096;
  const int obs = headroom::control::kFeatureCount;
  const std::vector<int> heads{5, 5, 5};
  ActorCritic ac(obs, heads, {64, 64}, 1);
  std::mt19937_64 rng(1);
  std::normal_distribution<double> normal(0.0, 1.0);
  headroom::rl::Batch b;
  b.obs.resize(obs, n);
  for (Eigen::Index i = 0; i < b.obs.size(); ++i) b.obs.data()[i] = normal(rng);
  b.actions.resize(3, n);
  b.logp_old.resize(n);
  b.advantages.resize(n);
  b.returns.resize(n);
  b.values_old.resize(n);
  headroom::rl::Mlp::Cache c;
  ac.actor().Forward(b.obs, &c);
  for (int i = 0; i < n; ++i) {
    int a[3] = {static_cast<int>(rng() % 5), static_cast<int>(rng() % 5),
                static_cast<int>(rng() % 5)};
    for (int h = 0; h < 3; ++h) b.actions(h, i) = a[h];
    b.logp_old(i) = headroom::rl::LogProb(heads, c.a.back().col(i).data(), a);
    b.advantages(i) = normal(rng);
    b.returns(i) = normal(rng);
    b.values_old(i) = 0.0;
  }
  headroom::rl::PpoTrainer trainer(&ac, {}, 2, kernels);
  for (auto _ : state) benchmark::DoNotOptimize(trainer.Update(b));
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(kernels.name);
}

void BM_PpoUpdate(benchmark::State& state) { PpoUpdate(state, headroom::rl::kernels::Best()); }
BENCHMARK(BM_PpoUpdate)->Unit(benchmark::kMillisecond);

void BM_PpoUpdatePortable(benchmark::State& state) {
  PpoUpdate(state, headroom::rl::kernels::Portable());
}
BENCHMARK(BM_PpoUpdatePortable)->Unit(benchmark::kMillisecond);

void BM_PolicyDecision(benchmark::State& state) {
  headroom::control::Policy p;
  p.net = ActorCritic(headroom::control::kFeatureCount, {5, 5, 5}, {64, 64}, 1);
  p.normalizer = headroom::rl::Normalizer(headroom::control::kFeatureCount);
  headroom::control::ActuatorLimits l;
  l.concurrency = {1, 16};
  l.group_size = {4, 16};
  l.nameplate_w = 400.0;
  headroom::control::PolicyController controller(p, l);
  std::vector<double> power{300.0};
  headroom::control::Inputs in;
  in.budget_w = 314.6;
  in.smoothed_power_w = power;
  in.concurrency = 8;
  in.group_size = 8;
  for (auto _ : state) {
    power[0] += 0.001;
    benchmark::DoNotOptimize(controller.Decide(in));
  }
}
BENCHMARK(BM_PolicyDecision);

}  // namespace
