// One vocabulary of a training job's phases, shared by the twin (which runs them), the
// controllers (which see them, and whose policies are trained on them), the agent's API (which
// trainers report them in) and the traces (their `phase` column).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace headroom {

enum class Phase : uint8_t {
  kIdle,        // nothing running on the GPUs for the job
  kStartup,     // loading: the job holds the GPUs, no step yet
  kRollout,     // generation: the only phase concurrency and group size steer
  kLogprob,     // reference / old-policy log-probabilities
  kTrain,       // the policy update
  kSync,        // weights to the rollout engines
  kCheckpoint,  // saving
  kStopped,     // the job has ended
};
inline constexpr int kPhaseCount = 8;
inline constexpr std::array<std::string_view, kPhaseCount> kPhaseNames = {
    "idle", "startup", "rollout", "logprob", "train", "sync", "checkpoint", "stopped"};

constexpr std::string_view PhaseName(Phase phase) {
  const auto i = static_cast<size_t>(phase);
  return i < kPhaseNames.size() ? kPhaseNames[i] : std::string_view("?");
}

constexpr std::optional<Phase> PhaseFromName(std::string_view name) {
  for (size_t i = 0; i < kPhaseNames.size(); ++i) {
    if (kPhaseNames[i] == name) return static_cast<Phase>(i);
  }
  return std::nullopt;
}

}  // namespace headroom
