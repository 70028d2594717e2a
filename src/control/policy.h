// A trained meta-controller policy: versioned JSON, and the controller that runs it.
//
// Inference is an Eigen forward pass of the actor (a few microseconds); no libtorch. The file
// holds the feature names and action heads it was trained with, the observation normaliser, the
// actor (and the critic, to resume training), and what it was trained on. Loading checks the
// format, version, family and shape; a file that does not fit is refused with the reason.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
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
// 2: phases and the shield; 3: the power-limit head; 4: the envelopes (where it was trained).
inline constexpr int kPolicyVersion = 4;
// A policy file is at most this large (the loader refuses larger before reading).
inline constexpr size_t kMaxPolicyBytes = size_t{64} << 20;
// Policies that steer a GRPO job's generation: they need a rollout phase to act on.
inline constexpr std::string_view kPolicyFamily = "grpo-generation";

// How the trainer a policy was trained for admits its sequences: the twin's rollout.admission
// (twin/rollout.h; the same names). Continuous refills the engine as sequences finish; chunked
// submits `concurrency` sequences and waits for the longest, so occupancy decays within each
// chunk, and a policy trained under one sees other features under the other.
enum class Admission { kContinuous, kChunked };
// "continuous", "chunked".
std::string_view AdmissionName(Admission admission);
// The admission of that name; nullopt for any other text.
std::optional<Admission> ParseAdmission(std::string_view name);

// Where a policy was trained, one per scenario: what it needs to act on a real job without the
// twin (headroom agent --controller ppo without --scenario). Per GPU.
struct PolicyEnvelope {
  std::string scenario;   // the twin scenario it was trained on
  double budget_w = 0.0;  // the default budget: the scenario's, within budget_range_w
  std::pair<double, double> budget_range_w;  // the budgets it was trained on: it acts there
  ActuatorLimits limits;  // concurrency and group-size ranges, nameplate, limit floor and rise
  int concurrency = 1;    // the trainer's own concurrency and group size there
  int group_size = 1;
  // How that trainer admits sequences ("admission"; absent in files of before it: continuous).
  Admission admission = Admission::kContinuous;
};

struct Policy {
  rl::ActorCritic net;
  rl::Normalizer normalizer;
  std::vector<std::string> trained_on;    // scenario names
  std::vector<PolicyEnvelope> envelopes;  // one per scenario of trained_on
  std::string trained_budget;             // e.g. "0.70-0.90 x default"
  std::string command;                    // the command that reproduces it
  double violation_target = 0.01;
  double cost_window_s = 0.5;
  bool group_size_only = false;  // the policy may not move concurrency (the paper's 72B null test)
  // The policy may not move group size: it stays at the trainer's own (GRPO trainers fix it in
  // their config; docs/TRAINERS.md). Concurrency and the power limit only.
  bool fixed_group_size = false;
  ShieldRule shield;  // the shield it was trained in, and runs in (before ShieldFor)
  // The controller acts as if the budget were this fraction of the one in force (JSON
  // "control_budget_fraction", absent: 1): an efficiency variant, the same network held to a
  // lower power where lower clocks cost fewer tokens than they save joules (docs/RESULTS.md,
  // "Tokens per joule"). Its power-limit levels and features see the derated budget; the
  // budget it is held to (violations, the shield, the guard) stays the one in force. [0.5, 1].
  double control_budget_fraction = 1.0;
  long long timesteps = 0;
  unsigned long long seed = 0;
};

std::string PolicyToJson(const Policy& policy);
// Which versions a read takes: the current one only, or also version 3 (no envelopes), which
// `headroom policy upgrade` reads to write it again with them.
enum class PolicyRead { kCurrent, kUpgrade };
// `source` names the file in errors.
Result<Policy> PolicyFromJson(std::string_view text, std::string_view source,
                              PolicyRead read = PolicyRead::kCurrent);
// The one loader: a file of at most kMaxPolicyBytes, read and checked.
Result<Policy> LoadPolicy(const std::string& path, PolicyRead read = PolicyRead::kCurrent);
// The envelope trained on `scenario`; null when the policy has none for it.
const PolicyEnvelope* FindEnvelope(const Policy& policy, std::string_view scenario);
// The admission every envelope of the policy was trained for; nullopt when it has no envelope
// or its envelopes differ (then ask the envelope in use: PolicyEnvelope::admission).
std::optional<Admission> TrainedAdmission(const Policy& policy);

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
