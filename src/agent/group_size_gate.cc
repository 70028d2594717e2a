#include "agent/group_size_gate.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string_view>

namespace headroom::agent {

std::string ParseGroupSizeChoices(const std::string& text, std::vector<int>* out) {
  std::vector<int> choices;
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    int v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || v < 1 ||
        v > 4096) {
      return fmt::format(
          "--group-size-choices: '{}' is not a group size (an integer from 1 to 4096; a list "
          "such as 4,8,16)",
          item);
    }
    choices.push_back(v);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  std::sort(choices.begin(), choices.end());
  if (std::adjacent_find(choices.begin(), choices.end()) != choices.end()) {
    return fmt::format("--group-size-choices: '{}' names a size twice", text);
  }
  *out = std::move(choices);
  return {};
}

int GroupSizeGate::Snap(int size) const {
  if (rule_.choices.empty()) return size;
  int best = rule_.choices.front();
  for (int c : rule_.choices) {
    if (std::abs(c - size) < std::abs(best - size)) best = c;  // strict: the lower on a tie
  }
  return best;
}

int GroupSizeGate::Decide(int current, int proposed, std::optional<int> step) {
  if (step) WentBack(*step);
  const int next = Snap(proposed);
  if (next == current) return current;
  if (rule_.min_steps > 0) {
    if (!step) return current;
    // Decided during `step`, the change is in force from step + 1 at the earliest: that is
    // min_steps after the step the last change came into force.
    if (changed_at_step_ && *step + 1 - InForceFrom() < rule_.min_steps) return current;
  }
  if (step) {  // none known with min_steps 0: the change still counts
    changed_at_step_ = *step;
    in_force_from_.reset();
    announced_ = next;
  }
  ++changes_;
  return next;
}

void GroupSizeGate::Confirm(int step, int group_size) {
  WentBack(step);
  if (announced_ && group_size == *announced_ && !in_force_from_ && changed_at_step_ &&
      step > *changed_at_step_) {
    in_force_from_ = step;
  }
}

void GroupSizeGate::WentBack(int step) {
  // At least min_steps below: a restart, not a report that lagged by a step or two (whose wait
  // is at most min_steps longer, the safe side). `step < InForceFrom()`: once only per going back.
  if (rule_.min_steps > 0 && changed_at_step_ && step <= *changed_at_step_ - rule_.min_steps &&
      step < InForceFrom()) {
    in_force_from_ = step;
  }
}

int GroupSizeGate::InForceFrom() const {
  return in_force_from_ ? *in_force_from_ : *changed_at_step_ + 1;
}

}  // namespace headroom::agent
