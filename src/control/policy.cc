#include "control/policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

namespace headroom::control {

namespace {

using nlohmann::json;

json MlpToJson(const rl::Mlp& mlp) {
  const Eigen::VectorXd p = mlp.Parameters();
  return json{{"sizes", mlp.sizes()},
              {"parameters", std::vector<double>(p.data(), p.data() + p.size())}};
}

std::vector<double> ToStd(const Eigen::VectorXd& v) { return {v.data(), v.data() + v.size()}; }

Error Bad(std::string_view source, std::string_view key, std::string_view reason) {
  return Error::Input(fmt::format("{}: key '{}': {}", source, key, reason));
}

}  // namespace

std::string PolicyToJson(const Policy& policy) {
  json names = json::array();
  for (std::string_view n : kFeatureNames) names.push_back(n);
  json j{
      {"format", kPolicyFormat},
      {"version", kPolicyVersion},
      {"family", kPolicyFamily},
      {"features", names},
      {"heads", policy.net.heads()},
      {"normalizer",
       {{"mean", ToStd(policy.normalizer.mean())},
        {"var", ToStd(policy.normalizer.var())},
        {"count", policy.normalizer.count()}}},
      {"actor", MlpToJson(policy.net.actor())},
      {"critic", MlpToJson(policy.net.critic())},
      {"trained_on", policy.trained_on},
      {"trained_budget", policy.trained_budget},
      {"violation_target", policy.violation_target},
      {"cost_window_s", policy.cost_window_s},
      {"actuators", policy.group_size_only ? json::array({"group_size"})
                                           : json::array({"concurrency", "group_size"})},
      {"timesteps", policy.timesteps},
      {"seed", policy.seed},
      {"command", policy.command},
  };
  return j.dump(1) + "\n";
}

Result<Policy> PolicyFromJson(std::string_view text, std::string_view source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse errors, and numbers out of range
    return Error::Input(fmt::format("{}: not JSON: {}", source, e.what()));
  }
  try {
    if (!j.is_object() || j.value("format", "") != kPolicyFormat) {
      return Bad(source, "format",
                 fmt::format("not a headroom policy (expected \"{}\")", kPolicyFormat));
    }
    if (!j.contains("version") || !j["version"].is_number_integer() ||
        j["version"].get<int>() != kPolicyVersion) {
      return Bad(
          source, "version",
          fmt::format("{}; this headroom reads version {} (retrain with headroom train)",
                      j.contains("version") ? j["version"].dump() : "missing", kPolicyVersion));
    }
    if (j.value("family", "") != kPolicyFamily) {
      return Bad(source, "family",
                 fmt::format("'{}'; this headroom runs '{}' policies", j.value("family", ""),
                             kPolicyFamily));
    }
    const auto features = j.at("features").get<std::vector<std::string>>();
    bool same = features.size() == kFeatureNames.size();
    for (size_t i = 0; same && i < features.size(); ++i) same = features[i] == kFeatureNames[i];
    if (!same) {
      return Bad(source, "features",
                 fmt::format("{} features that differ from the {} this headroom computes",
                             features.size(), kFeatureNames.size()));
    }
    const auto heads = j.at("heads").get<std::vector<int>>();
    if (heads != std::vector<int>{kConcurrencyMoves, kGroupLevels}) {
      return Bad(source, "heads",
                 fmt::format("{}; expected [{}, {}]", j.at("heads").dump(), kConcurrencyMoves,
                             kGroupLevels));
    }
    const auto actor_sizes = j.at("actor").at("sizes").get<std::vector<int>>();
    const auto critic_sizes = j.at("critic").at("sizes").get<std::vector<int>>();
    if (actor_sizes.size() < 2 || actor_sizes.front() != kFeatureCount ||
        actor_sizes.back() != kConcurrencyMoves + kGroupLevels) {
      return Bad(
          source, "actor.sizes",
          fmt::format("{} does not fit {} features and {} logits", j.at("actor").at("sizes").dump(),
                      kFeatureCount, kConcurrencyMoves + kGroupLevels));
    }
    std::vector<int> hidden(actor_sizes.begin() + 1, actor_sizes.end() - 1);
    if (hidden.size() > 8) return Bad(source, "actor.sizes", "at most 8 hidden layers");
    for (int h : hidden) {
      if (h <= 0 || h > 4096) {
        return Bad(source, "actor.sizes", "hidden sizes must be in [1, 4096]");
      }
    }
    std::vector<int> expected_critic{kFeatureCount};
    expected_critic.insert(expected_critic.end(), hidden.begin(), hidden.end());
    expected_critic.push_back(1);
    if (critic_sizes != expected_critic) {
      return Bad(source, "critic.sizes", "does not match the actor's hidden layers");
    }
    // Parameter counts from the sizes, checked before any network is allocated.
    const auto count = [](const std::vector<int>& sizes) {
      size_t n = 0;
      for (size_t l = 0; l + 1 < sizes.size(); ++l) {
        n += static_cast<size_t>(sizes[l + 1]) * static_cast<size_t>(sizes[l] + 1);
      }
      return n;
    };
    const auto ap = j.at("actor").at("parameters").get<std::vector<double>>();
    const auto cp = j.at("critic").at("parameters").get<std::vector<double>>();
    if (ap.size() != count(actor_sizes)) {
      return Bad(source, "actor.parameters",
                 fmt::format("{} values; the sizes need {}", ap.size(), count(actor_sizes)));
    }
    if (cp.size() != count(critic_sizes)) {
      return Bad(source, "critic.parameters",
                 fmt::format("{} values; the sizes need {}", cp.size(), count(critic_sizes)));
    }
    for (const auto* values : {&ap, &cp}) {
      for (double v : *values) {
        if (!std::isfinite(v)) return Bad(source, "parameters", "every parameter must be finite");
      }
    }
    Policy p;
    p.net = rl::ActorCritic(kFeatureCount, heads, hidden, 0);
    p.net.actor().SetParameters(
        Eigen::Map<const Eigen::VectorXd>(ap.data(), static_cast<Eigen::Index>(ap.size())));
    p.net.critic().SetParameters(
        Eigen::Map<const Eigen::VectorXd>(cp.data(), static_cast<Eigen::Index>(cp.size())));
    const auto mean = j.at("normalizer").at("mean").get<std::vector<double>>();
    const auto var = j.at("normalizer").at("var").get<std::vector<double>>();
    if (mean.size() != kFeatureNames.size() || var.size() != kFeatureNames.size()) {
      return Bad(source, "normalizer", fmt::format("needs {} means and variances", kFeatureCount));
    }
    for (double v : var) {
      if (!(v >= 0.0)) return Bad(source, "normalizer.var", "variances must be >= 0");
    }
    p.normalizer.Set(Eigen::Map<const Eigen::VectorXd>(mean.data(), kFeatureCount),
                     Eigen::Map<const Eigen::VectorXd>(var.data(), kFeatureCount),
                     j.at("normalizer").value("count", 1.0));
    p.trained_on = j.value("trained_on", std::vector<std::string>{});
    p.trained_budget = j.value("trained_budget", "");
    p.violation_target = j.value("violation_target", 0.01);
    p.cost_window_s = j.value("cost_window_s", 0.5);
    if (j.contains("actuators")) {
      const auto actuators = j.at("actuators").get<std::vector<std::string>>();
      if (actuators == std::vector<std::string>{"group_size"}) {
        p.group_size_only = true;
      } else if (actuators != std::vector<std::string>{"concurrency", "group_size"}) {
        return Bad(source, "actuators",
                   "expected [\"concurrency\", \"group_size\"] or [\"group_size\"]");
      }
    }
    p.timesteps = j.value("timesteps", 0LL);
    p.seed = j.value("seed", 0ULL);
    p.command = j.value("command", "");
    return p;
  } catch (const json::exception& e) {
    return Error::Input(fmt::format("{}: {}", source, e.what()));
  }
}

Command CommandFromActions(const ActuatorLimits& limits, const int* actions, int concurrency) {
  Command c;
  const int level =
      NearestConcurrencyLevel(limits.concurrency, concurrency) + actions[0] - kConcurrencyMoves / 2;
  c.concurrency =
      ConcurrencyAtLevel(limits.concurrency, std::clamp(level, 0, kConcurrencyLevels - 1));
  c.group_size = GroupAtLevel(limits.group_size, actions[1]);
  return c;
}

PolicyController::PolicyController(const Policy& policy, ActuatorLimits limits)
    : policy_(policy), limits_(limits), x_(kFeatureCount) {}

Command PolicyController::Decide(const Inputs& in) {
  features_.Compute(in, limits_, x_.data());
  const Eigen::VectorXd z = policy_.normalizer.Apply(x_);
  policy_.net.actor().ForwardOne(z, &logits_, &scratch_);
  int actions[2];
  rl::Argmax(policy_.net.heads(), logits_.data(), actions);
  Command c = CommandFromActions(limits_, actions, in.concurrency);
  if (policy_.group_size_only) c.concurrency.reset();
  return c;
}

}  // namespace headroom::control
