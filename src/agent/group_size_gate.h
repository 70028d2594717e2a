// Group size the way GRPO trainers can take it (docs/TRAINERS.md): a trainer fixes its group in
// its config (TRL num_generations, verl rollout.n, OpenRLHF n_samples_per_prompt) and the group
// is the baseline of its advantages, so the agent changes it only
//   - at a step boundary: a decision made during step s applies from step s + 1, and none is made
//     while the trainer's step is unknown (no fresh report);
//   - among the choices the operator allows (--group-size-choices), the nearest one (the lower
//     on a tie); a single choice fixes it;
//   - at most once every `min_steps` steps (--group-size-min-steps; 0 lifts the step rules);
//   - a step at least `min_steps` below the one the last change was decided in means the
//     trainer went back (a restart from a checkpoint, a new run), not a report that lagged: the
//     last change counts as in force from that step, so the next may come `min_steps` steps
//     later, not once the trainer is back past the old step numbers.
// Pure: no clock, no I/O.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace headroom::agent {

struct GroupSizeRule {
  std::vector<int> choices;  // ascending, distinct, each >= 1; empty: any size the limits allow
  // >= 1; 0: no step rule at all (any decision changes it at once, as before issue 34: what
  // `headroom eval` does, and what the agent's agreement test with it needs).
  int min_steps = 10;
};

// The choices parsed from "4,8,16": one clear line on a bad entry.
// REQUIRES nothing; returns the error text, empty when `out` was filled.
std::string ParseGroupSizeChoices(const std::string& text, std::vector<int>* out);

class GroupSizeGate {
 public:
  explicit GroupSizeGate(GroupSizeRule rule) : rule_(std::move(rule)) {}

  // The nearest allowed size to `size` (the lower on a tie); `size` itself without choices.
  int Snap(int size) const;

  // The group size to announce for the next step: `current` (the one announced now) unless the
  // controller's `proposed` differs and a change is allowed at trainer step `step` (nullopt:
  // the trainer's step is not known). Records the change.
  int Decide(int current, int proposed, std::optional<int> step);
  // A trainer's report: `group_size` in force at `step`. The first step that reports the last
  // change in force is where its min_steps count from (a trainer that read the decision a step
  // late, or whose report lagged, is counted from where it really took it); without one, from
  // the step after the one it was decided in.
  void Confirm(int step, int group_size);

  // The trainer step during which the last change was decided; none before the first.
  std::optional<int> changed_at_step() const { return changed_at_step_; }
  int changes() const { return changes_; }
  const GroupSizeRule& rule() const { return rule_; }

 private:
  int InForceFrom() const;  // REQUIRES: changed_at_step_
  void WentBack(int step);  // a step reported or decided at: the rule above for going back

  GroupSizeRule rule_;
  std::optional<int> changed_at_step_;
  std::optional<int> announced_;      // the last change's size
  std::optional<int> in_force_from_;  // the step a report first had it in force
  int changes_ = 0;
};

}  // namespace headroom::agent
