#include "coord/stagger.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace headroom::coord {
namespace {

struct Segment {
  double from_s, to_s, power_w;
};

// The timeline as constant pieces from now: the rest of the current part, the rest of the step,
// the hold, then whole steps. Also when the next step starts.
std::vector<Segment> Segments(const StepTimeline& t, double hold_s, double horizon_s,
                              double* next_step_s) {
  std::vector<Segment> out;
  const double step_s = std::max(0.0, t.rollout_s) + std::max(0.0, t.rest_s);
  if (!(step_s > 0.0)) {
    out.push_back({0.0, horizon_s, t.in_rollout ? t.rollout_w : t.rest_w});
    if (next_step_s != nullptr) *next_step_s = std::numeric_limits<double>::infinity();
    return out;
  }
  double at = 0.0;
  if (t.held_left_s > 0.0) {  // held now: the hold's rest, then the next step
    out.push_back({at, at + t.held_left_s, t.held_w});
    at += t.held_left_s;
    hold_s = 0.0;
  } else if (t.in_rollout) {
    const double left = std::max(0.0, t.rollout_s - t.phase_elapsed_s);
    out.push_back({at, at + left, t.rollout_w});
    at += left;
    out.push_back({at, at + std::max(0.0, t.rest_s), t.rest_w});
    at += std::max(0.0, t.rest_s);
  } else {
    const double left = std::max(0.0, t.rest_s - t.phase_elapsed_s);
    out.push_back({at, at + left, t.rest_w});
    at += left;
  }
  if (next_step_s != nullptr) *next_step_s = at;
  if (hold_s > 0.0) {
    out.push_back({at, at + hold_s, t.held_w});
    at += hold_s;
  }
  while (at < horizon_s) {
    out.push_back({at, at + std::max(0.0, t.rollout_s), t.rollout_w});
    at += std::max(0.0, t.rollout_s);
    out.push_back({at, at + std::max(0.0, t.rest_s), t.rest_w});
    at += std::max(0.0, t.rest_s);
  }
  return out;
}

double Excess(const std::vector<double>& total_w, double budget_w, double dt_s) {
  double j = 0.0;
  for (double p : total_w) j += std::max(0.0, p - budget_w) * dt_s;
  return j;
}

}  // namespace

std::vector<double> PredictPower(const StepTimeline& t, double hold_s, double horizon_s,
                                 double dt_s) {
  const size_t cells = static_cast<size_t>(std::ceil(horizon_s / dt_s - 1e-9));
  std::vector<double> out(cells, 0.0);
  // Each cell's mean: the pieces' overlaps with it.
  for (const Segment& s : Segments(t, hold_s, horizon_s, nullptr)) {
    if (!(s.to_s > s.from_s)) continue;
    const size_t first = static_cast<size_t>(std::max(0.0, std::floor(s.from_s / dt_s)));
    for (size_t c = first; c < cells; ++c) {
      const double a = static_cast<double>(c) * dt_s;
      const double b = a + dt_s;
      if (a >= s.to_s) break;
      const double overlap = std::min(b, s.to_s) - std::max(a, s.from_s);
      if (overlap > 0.0) out[c] += s.power_w * overlap / dt_s;
    }
  }
  return out;
}

StaggerPlan PlanHolds(const std::map<std::string, StaggerJob>& jobs, const StaggerOptions& o) {
  StaggerPlan plan;
  const size_t cells = static_cast<size_t>(std::ceil(o.horizon_s / o.dt_s - 1e-9));
  std::vector<double> candidates = {0.0};
  for (double h = o.hold_step_s; h <= o.max_hold_s + 1e-9; h += o.hold_step_s) {
    candidates.push_back(h);
  }
  struct Work {
    const std::string* name;
    const StaggerJob* job;
    double next_step_s;
    size_t candidates;            // holds it may take (1: none)
    std::vector<double> profile;  // with the chosen hold
    size_t chosen = 0;
  };
  std::vector<Work> work;
  std::vector<double> total(cells, 0.0);
  for (const auto& [name, j] : jobs) {
    Work w{&name, &j, 0.0, 1, {}, 0};
    Segments(j.timeline, 0.0, o.horizon_s, &w.next_step_s);
    // A step that does not start within the horizon cannot be moved in it; nor one held now.
    if (w.next_step_s < o.horizon_s && !(j.timeline.held_left_s > 0.0)) {
      w.candidates = candidates.size();
    }
    w.profile = PredictPower(j.timeline, 0.0, o.horizon_s, o.dt_s);
    for (size_t i = 0; i < cells; ++i) total[i] += w.profile[i];
    work.push_back(std::move(w));
  }
  std::stable_sort(work.begin(), work.end(),
                   [](const Work& a, const Work& b) { return a.next_step_s < b.next_step_s; });
  plan.excess_before_j = Excess(total, o.budget_w, o.dt_s);
  plan.peak_before_w = total.empty() ? 0.0 : *std::max_element(total.begin(), total.end());

  std::vector<double> trial(cells);
  for (int pass = 0; pass < std::max(1, o.passes); ++pass) {
    bool changed = false;
    for (Work& w : work) {
      if (w.candidates < 2) continue;
      for (size_t i = 0; i < cells; ++i) total[i] -= w.profile[i];
      double best = std::numeric_limits<double>::infinity();
      size_t best_c = 0;
      std::vector<double> best_profile;
      for (size_t c = 0; c < w.candidates; ++c) {
        std::vector<double> p = PredictPower(w.job->timeline, candidates[c], o.horizon_s, o.dt_s);
        for (size_t i = 0; i < cells; ++i) trial[i] = total[i] + p[i];
        const double cost = Excess(trial, o.budget_w, o.dt_s) * o.value_tokens_per_j +
                            candidates[c] * w.job->tokens_per_s;
        if (cost < best - 1e-9) {  // ties: the shorter hold
          best = cost;
          best_c = c;
          best_profile = std::move(p);
        }
      }
      if (best_c != w.chosen) changed = true;
      w.chosen = best_c;
      w.profile = std::move(best_profile);
      for (size_t i = 0; i < cells; ++i) total[i] += w.profile[i];
    }
    if (!changed) break;
  }
  plan.excess_after_j = Excess(total, o.budget_w, o.dt_s);
  plan.peak_after_w = total.empty() ? 0.0 : *std::max_element(total.begin(), total.end());
  for (const Work& w : work) {
    const double h = candidates[w.chosen];
    plan.hold_s[*w.name] = h;
    plan.hold_cost_tokens += h * w.job->tokens_per_s;
  }
  plan.tokens_saved =
      std::max(0.0, (plan.excess_before_j - plan.excess_after_j) * o.value_tokens_per_j -
                        plan.hold_cost_tokens);
  return plan;
}

}  // namespace headroom::coord
