#include "sim/checkpoint_select.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "sim/budget_plan.h"
#include "sim/episode.h"
#include "sim/evaluate.h"

namespace headroom::sim {
namespace {

Result<size_t> WindowOf(const control::Policy& policy) {
  for (size_t w = 0; w < kScoreWindowsS.size(); ++w) {
    if (std::abs(kScoreWindowsS[w] - policy.cost_window_s) < 1e-9) return w;
  }
  return Error::Usage(fmt::format(
      "checkpoint selection scores in eval's windows (0.5, 30, 300 s); the policy's is {} s",
      policy.cost_window_s));
}

// `controllers` on the validation episodes under budget `b` of kValidationBudgets.
Result<EvalResult> Run(const twin::Scenario& scenario, const control::Policy& policy, size_t b,
                       std::vector<std::string> controllers, const ValidationConfig& config) {
  EvalConfig c;
  c.scenario = scenario;
  c.seeds = config.seeds;
  c.first_seed = kValidationSeed0;
  c.steps = config.steps;
  c.controllers = std::move(controllers);
  c.policy = &policy;
  c.violation_target = policy.violation_target;
  c.threads = config.threads;
  c.record_power = false;
  c.references = false;
  // As `eval`: the scenario's budget, or under a generated schedule the top of its range.
  c.budget_w = b == 0 ? scenario.budget_w : scenario.budget_range_w.second;
  if (b == 1) {
    auto demand_response = ParseBudgetGenerator("demand-response");
    if (!demand_response) return std::move(demand_response).error();
    c.schedule = **demand_response;
  }
  return Evaluate(c);
}

}  // namespace

double CheckpointScore::tokens() const {
  double t = 0.0;
  for (const ValidationScore& b : budgets) t += b.tokens;
  return t;
}

double CheckpointScore::violation_fraction() const {
  double v = 0.0;
  for (const ValidationScore& b : budgets) v = std::max(v, b.violation_fraction);
  return v;
}

bool Dominates(const ValidationScore& a, const ValidationScore& b) {
  return a.tokens >= b.tokens && a.violation_fraction <= b.violation_fraction;
}

size_t SelectCheckpoint(std::span<const CheckpointScore> scores, double violation_target) {
  // Larger is better, compared in order; ties go to the later snapshot (>=).
  const auto key = [&](const CheckpointScore& s) {
    const bool meets = s.violation_fraction() <= violation_target;
    return meets ? std::make_tuple(1, static_cast<double>(s.dominated), s.tokens())
                 : std::make_tuple(0, -s.violation_fraction(), s.tokens());
  };
  size_t best = 0;
  for (size_t i = 1; i < scores.size(); ++i) {
    if (key(scores[i]) >= key(scores[best])) best = i;
  }
  return best;
}

Result<std::vector<ValidationBaseline>> ValidateBaselines(const twin::Scenario& scenario,
                                                          const control::Policy& policy,
                                                          const ValidationConfig& config) {
  auto window = WindowOf(policy);
  if (!window) return std::move(window).error();
  std::vector<ValidationBaseline> out;
  for (size_t b = 0; b < kValidationBudgets.size(); ++b) {
    const std::string safe = b == 0 ? "static-safe" : "static-safe-lowest";
    auto r = Run(scenario, policy, b, {safe, "power-cap", "pid"}, config);
    if (!r) return std::move(r).error();
    for (const ControllerEval& e : r->controllers) {
      out.push_back({e.name, b, {e.tokens.mean, e.violation_fraction[*window].mean}});
    }
  }
  return out;
}

Result<CheckpointScore> ValidateCheckpoint(const twin::Scenario& scenario,
                                           const control::Policy& policy, long long timesteps,
                                           std::span<const ValidationBaseline> baselines,
                                           const ValidationConfig& config) {
  auto window = WindowOf(policy);
  if (!window) return std::move(window).error();
  CheckpointScore score;
  score.timesteps = timesteps;
  for (size_t b = 0; b < kValidationBudgets.size(); ++b) {
    auto r = Run(scenario, policy, b, {"ppo"}, config);
    if (!r) return std::move(r).error();
    const ControllerEval& ppo = r->controllers.front();
    score.budgets[b] = {ppo.tokens.mean, ppo.violation_fraction[*window].mean};
  }
  for (const ValidationBaseline& base : baselines) {
    if (Dominates(score.budgets[base.budget], base.score)) ++score.dominated;
  }
  return score;
}

}  // namespace headroom::sim
