// The agent's hot paths: one decision (Agent::Tick with the PPO policy in its shield, 8 GPUs) and
// the bodies the API serves most (actuation, status). The whole agent against a Python peer is
// bench/agent_overhead.py (`make bench-agent`).
#include <benchmark/benchmark.h>

#include "agent/agent.h"
#include "agent/api.h"
#include "control/baselines.h"
#include "control/features.h"
#include "control/policy.h"
#include "rl/actor_critic.h"

namespace {

using headroom::agent::Agent;
using headroom::agent::AgentConfig;

AgentConfig EightGpuConfig() {
  AgentConfig c;
  c.budget_w = 600.0;
  c.limits.concurrency = {1, 512};
  c.limits.group_size = {4, 16};
  c.limits.nameplate_w = 700.0;
  c.safe_concurrency = 1;
  c.safe_group_size = 8;
  return c;
}

headroom::telemetry::Sample EightGpus(double t_s, double w) {
  headroom::telemetry::Sample s;
  s.t_s = t_s;
  for (int g = 0; g < 8; ++g) s.gpus.push_back({w + g, false, {}, {}, {}, {}});
  return s;
}

void BM_AgentDecision8Gpus(benchmark::State& state) {
  headroom::control::Policy p;
  p.net = headroom::rl::ActorCritic(headroom::control::kFeatureCount, {5, 5}, {64, 64}, 1);
  p.normalizer = headroom::rl::Normalizer(headroom::control::kFeatureCount);
  const AgentConfig config = EightGpuConfig();
  headroom::control::PolicyController inner(p, config.limits);
  headroom::control::Shield shield(inner, headroom::control::ShieldFor(0.5, 0.5),
                                   config.limits.concurrency);
  Agent agent(config, shield);
  double t_s = 0.0;
  for (auto _ : state) {
    const headroom::Result<headroom::telemetry::Sample> sample =
        EightGpus(t_s, 550.0 + 40.0 * ((static_cast<int>(t_s * 2) % 7) - 3) / 3.0);
    benchmark::DoNotOptimize(agent.Tick(t_s, sample));
    t_s += 0.5;
  }
}
BENCHMARK(BM_AgentDecision8Gpus);

void BM_ActuationJson(benchmark::State& state) {
  headroom::agent::Actuation a;
  a.concurrency = 96;
  a.group_size = 8;
  a.seq = 12345;
  a.valid_for_s = 5.0;
  a.reason = "ppo: rollout at step 42";
  for (auto _ : state) benchmark::DoNotOptimize(headroom::agent::ActuationJson(a));
}
BENCHMARK(BM_ActuationJson);

void BM_StatusJson8Gpus(benchmark::State& state) {
  headroom::control::Uncontrolled controller(64, 8);
  Agent agent(EightGpuConfig(), controller);
  for (int k = 0; k < 1000; ++k) agent.Tick(0.5 * k, EightGpus(0.5 * k, 580.0));
  const headroom::agent::AgentStatus s = agent.Status(500.0);
  for (auto _ : state) benchmark::DoNotOptimize(headroom::agent::StatusJson(s));
}
BENCHMARK(BM_StatusJson8Gpus);

}  // namespace
