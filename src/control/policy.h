// A trained meta-controller policy: versioned JSON, and the controller that runs it.
//
// Inference is an Eigen forward pass of the actor (a few microseconds); no libtorch. The file
// holds the feature names and action heads it was trained with, the observation normaliser, the
// actor (and the critic, to resume training), and what it was trained on. Loading checks the
// format, version, family and shape; a file that does not fit is refused with the reason.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "control/actuators.h"
#include "control/baselines.h"
#include "control/controller.h"
#include "control/features.h"
#include "rl/actor_critic.h"
#include "rl/normalizer.h"

namespace headroom::control {

inline constexpr std::string_view kPolicyFormat = "headroom-policy";
inline constexpr int kPolicyVersion = 3;  // 2: phases and the shield; 3: the power-limit head
// Policies that steer a GRPO job's generation: they need a rollout phase to act on.
inline constexpr std::string_view kPolicyFamily = "grpo-generation";

struct Policy {
  rl::ActorCritic net;
  rl::Normalizer normalizer;
  std::vector<std::string> trained_on;  // scenario names
  std::string trained_budget;           // e.g. "0.70-0.90 x default"
  std::string command;                  // the command that reproduces it
  double violation_target = 0.01;
  double cost_window_s = 0.5;
  bool group_size_only = false;  // the policy may not move concurrency (the paper's 72B null test)
  // The policy may not move group size: it stays at the trainer's own (GRPO trainers fix it in
  // their config; docs/TRAINERS.md). Concurrency and the power limit only.
  bool fixed_group_size = false;
  ShieldRule shield;             // the shield it was trained in, and runs in (before ShieldFor)
  long long timesteps = 0;
  unsigned long long seed = 0;
};

std::string PolicyToJson(const Policy& policy);
// `source` names the file in errors.
Result<Policy> PolicyFromJson(std::string_view text, std::string_view source);

// Runs a policy deterministically (the most likely action of each head).
class PolicyController final : public Controller {
 public:
  PolicyController(const Policy& policy, ActuatorLimits limits);
  std::string_view name() const override { return "ppo"; }
  void Reset() override { features_.Reset(); }
  Command Decide(const Inputs& in) override;

 private:
  const Policy& policy_;
  ActuatorLimits limits_;
  FeatureState features_;
  Eigen::VectorXd x_;
  Eigen::VectorXd logits_;
  std::vector<Eigen::VectorXd> scratch_;
};

// Maps the actions of the kActionHeads heads to a command, given the concurrency and the budget
// per GPU in force.
Command CommandFromActions(const ActuatorLimits& limits, const int* actions, int concurrency,
                           double budget_w);

}  // namespace headroom::control
