#include "twin/calibrate_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "common/stats.h"

namespace headroom::twin {
namespace {

// The median of what was collected (common/stats.h), NaN for none.
double MedianOf(std::vector<double> v) { return v.empty() ? std::nan("") : Median(v); }

double NormalCdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

// A run of samples of one phase within one step.
struct Segment {
  Phase phase = Phase::kIdle;
  int step = 0;
  size_t begin = 0, end = 0;  // sample indices [begin, end)
};

std::vector<Segment> Segments(const std::vector<JobSample>& s) {
  std::vector<Segment> out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (out.empty() || out.back().phase != s[i].phase || out.back().step != s[i].step) {
      out.push_back({s[i].phase, s[i].step, i, i});
    }
    out.back().end = i + 1;
  }
  return out;
}

// The fraction of a step change still showing in a sample averaged over the trailing window_s,
// taken d_s after the change, for a first-order lag of time constant tau_s.
double LagLeft(double d_s, double tau_s, double window_s) {
  if (tau_s <= 0.0 && window_s <= 0.0) return 0.0;
  if (window_s <= 0.0) return std::exp(-d_s / tau_s);
  const double from = std::max(0.0, d_s - window_s);
  const double span = d_s - from;  // the part of the window after the change
  if (span <= 0.0) return 1.0;
  const double after = tau_s > 0.0 ? tau_s * (std::exp(-from / tau_s) - std::exp(-d_s / tau_s))
                                   : 0.0;  // the change's remainder averaged over the window
  return ((window_s - span) + after) / window_s;
}

}  // namespace

double CappedLognormalMean(double median, double sigma, double cap) {
  const double mu = std::log(median);
  if (sigma <= 0.0) return std::min(median, cap);
  const double z = (std::log(cap) - mu) / sigma;
  return std::exp(mu + sigma * sigma / 2.0) * NormalCdf(z - sigma) + cap * (1.0 - NormalCdf(z));
}

double MedianForCappedMean(double mean, double sigma, double cap) {
  if (mean >= cap) return cap;
  double lo = 1e-6, hi = cap;  // the capped mean rises with the median
  for (int i = 0; i < 200; ++i) {
    const double mid = std::sqrt(lo * hi);
    (CappedLognormalMean(mid, sigma, cap) < mean ? lo : hi) = mid;
  }
  return std::sqrt(lo * hi);
}

Result<TraceCalibration> CalibrateFromTrace(const std::vector<JobSample>& samples,
                                            const Scenario& base, const std::string& name) {
  if (!base.has_rollout) {
    return Error::Usage(fmt::format("the base scenario {} has no rollout", base.name));
  }
  if (samples.size() < 8) return Error::Input("fewer than 8 samples");
  std::vector<double> gaps;
  for (size_t i = 1; i < samples.size(); ++i) gaps.push_back(samples[i].t_s - samples[i - 1].t_s);
  const double dt = MedianOf(gaps);
  if (!(dt > 0.0)) return Error::Input("the samples' times do not increase");

  const std::vector<Segment> segments = Segments(samples);
  // Complete steps: a rollout that follows an earlier step's phases and is followed by the
  // next step's rollout (the first and the last step seen are cut by the trace's ends).
  std::vector<int> order;  // steps in the order their rollouts appear
  std::map<int, std::vector<const Segment*>> by_step;
  for (const Segment& g : segments) {
    if (g.phase == Phase::kRollout && (order.empty() || order.back() != g.step)) {
      order.push_back(g.step);
    }
    by_step[g.step].push_back(&g);
  }
  std::vector<int> steps;
  for (size_t k = 1; k + 1 < order.size(); ++k) {
    const auto& segs = by_step[order[k]];
    const bool has_train = std::any_of(segs.begin(), segs.end(),
                                       [](const Segment* g) { return g->phase == Phase::kTrain; });
    if (has_train || !base.has_train) steps.push_back(order[k]);
  }
  if (static_cast<int>(steps.size()) < kMinCalibrationSteps) {
    return Error::Input(fmt::format(
        "{} complete training steps (a rollout, the phases after it, the next rollout) in the "
        "trace; at least {} are needed",
        steps.size(), kMinCalibrationSteps));
  }

  TraceCalibration out;
  out.scenario = base;
  Scenario& s = out.scenario;
  s.name = name;
  s.description = fmt::format("calibrated from an agent trace on base scenario {}", base.name);
  out.steps = static_cast<int>(steps.size());
  out.interval_s = dt;
  const auto note = [&](std::string key, double value, double was, std::string how) {
    out.values.push_back({std::move(key), value, was, std::move(how)});
  };

  // Durations and tokens per step.
  std::map<Phase, double> phase_s;  // summed over the complete steps
  std::map<Phase, int> phase_segments;
  double completions = 0.0, sequences = 0.0, step_tokens = 0.0;
  for (int step : steps) {
    double step_completions = 0.0, group = 0.0;
    for (const Segment* g : by_step[step]) {
      phase_s[g->phase] += static_cast<double>(g->end - g->begin) * dt;
      // Occurrences: runs of the phase, whatever the step column says (a trainer may count the
      // next step before its sync's last sample).
      if (g->begin == 0 || samples[g->begin - 1].phase != g->phase) ++phase_segments[g->phase];
      for (size_t i = g->begin; i < g->end; ++i) step_completions += samples[i].tokens;
      if (g->phase == Phase::kRollout) group = samples[g->begin].group_size;
    }
    if (!(group >= 1.0)) group = base.group_size;
    const double seqs = base.prompts_per_step * std::round(group);
    completions += step_completions;
    sequences += seqs;
    step_tokens += step_completions + seqs * base.prompt_tokens;
  }
  const int gpus = base.gpus;
  if (base.logprob_passes > 0 && phase_s[Phase::kLogprob] > 0.0) {
    s.logprob_tokens_per_s = step_tokens * base.logprob_passes / (gpus * phase_s[Phase::kLogprob]);
    note("logprob.tokens_per_s", s.logprob_tokens_per_s, base.logprob_tokens_per_s,
         "the steps' tokens x passes over the phase's GPU-seconds");
  }
  if (base.has_train && phase_s[Phase::kTrain] > 0.0) {
    s.train_tokens_per_s = step_tokens / (gpus * phase_s[Phase::kTrain]);
    note("train.tokens_per_s", s.train_tokens_per_s, base.train_tokens_per_s,
         "the steps' tokens over the phase's GPU-seconds");
  }
  if (phase_segments[Phase::kSync] > 0) {
    s.sync_s = phase_s[Phase::kSync] / phase_segments[Phase::kSync];
    note("sync.duration_s", s.sync_s, base.sync_s, "mean over the steps");
  }
  if (phase_segments[Phase::kCheckpoint] > 0) {
    s.checkpoint_s = phase_s[Phase::kCheckpoint] / phase_segments[Phase::kCheckpoint];
    note("checkpoint.duration_s", s.checkpoint_s, base.checkpoint_s, "mean over the checkpoints");
  }
  if (sequences > 0.0 && completions > 0.0) {
    s.length_median_tokens =
        MedianForCappedMean(completions / sequences, base.length_sigma, base.max_new_tokens);
    note("rollout.length_median_tokens", s.length_median_tokens, base.length_median_tokens,
         fmt::format("mean completion {:.1f} tokens, lognormal sigma {} capped at {}",
                     completions / sequences, base.length_sigma, base.max_new_tokens));
  }

  // Phase powers: settled samples of long segments, lag-corrected last samples of short ones.
  const double settle_s = base.telemetry_average_s + 3.0 * std::max(base.tau_up_s, base.tau_down_s);
  const auto level = [&](Phase phase) -> std::optional<double> {
    std::vector<double> settled, corrected;
    for (int step : steps) {
      for (const Segment* g : by_step[step]) {
        if (g->phase != phase) continue;
        const double length_s = static_cast<double>(g->end - g->begin) * dt;
        if (length_s > settle_s + dt) {
          for (size_t i = g->begin; i < g->end; ++i) {
            if (static_cast<double>(i - g->begin) * dt >= settle_s) {
              settled.push_back(samples[i].power_w);
            }
          }
        } else if (g->begin > 0 && samples[g->begin - 1].phase != phase) {
          // (A run of the phase that the step column splits -- a trainer counting the next step
          // before its sync's last sample -- is no change: only its first part is corrected.)
          const double before = samples[g->begin - 1].power_w;
          const double last = samples[g->end - 1].power_w;
          const double tau = last < before ? base.tau_down_s : base.tau_up_s;
          // The change came within the sample interval before the segment's first sample.
          const double since_s = length_s - dt / 2.0;
          const double f = LagLeft(since_s, tau, base.telemetry_average_s);
          if (f < 0.95) corrected.push_back((last - before * f) / (1.0 - f));
        }
      }
    }
    if (!settled.empty()) return MedianOf(settled);
    if (!corrected.empty()) return MedianOf(corrected);
    return std::nullopt;
  };
  if (auto p = level(Phase::kLogprob); p && base.logprob_passes > 0) {
    s.logprob_power_w = *p;
    note("logprob.power_w", *p, base.logprob_power_w, "median of the settled samples");
  }
  if (auto p = level(Phase::kTrain); p && base.has_train) {
    s.train_power_w = *p;
    note("train.power_w", *p, base.train_power_w, "median of the settled samples");
  }
  if (auto p = level(Phase::kSync); p && phase_segments[Phase::kSync] > 0) {
    s.sync_power_w = std::max(0.0, *p);
    note("sync.power_w", s.sync_power_w, base.sync_power_w,
         "settled samples, or the last with the lag taken out");
  }

  // Occupancy per engine: the concurrency in force (a sample's is decided at its time, so an
  // interval ran under the previous sample's), the step's sequences and the KV cache bound it.
  const int kv = KvCapacitySequences(base);
  const auto bound = [&](const JobSample& before, const JobSample& x) {
    const double group = std::round(x.group_size >= 1.0 ? x.group_size : base.group_size);
    return std::min({before.concurrency, base.prompts_per_step * group / base.engines(),
                     static_cast<double>(kv)});
  };
  // Decode throughput: each rollout's first full interval has every sequence in flight.
  std::vector<double> ratios;
  for (int step : steps) {
    for (const Segment* g : by_step[step]) {
      if (g->phase != Phase::kRollout || g->end - g->begin < 3) continue;
      // The first interval after prefill: the second sample of the rollout (the first holds
      // the prompts' prefill).
      const JobSample& x = samples[g->begin + 1];
      const double n = bound(samples[g->begin], x);
      const double predicted = base.decode.TokensPerS(n) * base.engines() * dt;
      if (n > 0.0 && predicted > 0.0 && x.tokens > 0.0) ratios.push_back(x.tokens / predicted);
    }
  }
  if (ratios.empty()) return Error::Input("no rollout long enough to measure decode throughput");
  const double scale = MedianOf(ratios);
  if (!std::isfinite(scale) || scale <= 0.0) {
    return Error::Input("the rollouts' first intervals generated no tokens to measure");
  }
  s.decode.tokens_per_s.b0 *= scale;
  s.decode.tokens_per_s.l *= scale;
  note("rollout.decode_tokens_per_s_l", s.decode.tokens_per_s.l, base.decode.tokens_per_s.l,
       fmt::format("the base curve x {:.4f}, from each rollout's first full interval", scale));

  // Decode power: occupancy from tokens, power a lag later; fit (b0, l) on the base's shape.
  const double lag_s = base.telemetry_average_s / 2.0 + base.tau_up_s;
  const size_t lag = static_cast<size_t>(std::lround(lag_s / dt));
  std::vector<double> occupancy, power;
  for (int step : steps) {
    for (const Segment* g : by_step[step]) {
      if (g->phase != Phase::kRollout) continue;
      for (size_t i = g->begin + 1; i + lag < g->end; ++i) {
        if (static_cast<double>(i - g->begin) * dt < settle_s) continue;  // prefill and lag
        const double rate = samples[i].tokens / dt / base.engines();
        if (!(rate > 0.0)) continue;
        const double top = std::max(bound(samples[i - 1], samples[i]), 1.0);
        double lo = 0.0, hi = top;                     // TokensPerS rises with n
        if (s.decode.TokensPerS(hi) < rate) continue;  // beyond the curve: not a clean pair
        for (int it = 0; it < 60; ++it) {
          const double mid = (lo + hi) / 2.0;
          (s.decode.TokensPerS(mid) < rate ? lo : hi) = mid;
        }
        occupancy.push_back((lo + hi) / 2.0);
        power.push_back(samples[i + lag].power_w);
      }
    }
  }
  if (occupancy.size() >= 4) {
    // PowerW is affine in (b0, l) for a fixed shape: three evaluations give its two slopes.
    const auto with = [&](double b0, double l) {
      DecodeCurves d = s.decode;
      d.power_w.b0 = b0;
      d.power_w.l = l;
      return d;
    };
    const double b0 = base.decode.power_w.b0, l = base.decode.power_w.l;
    const DecodeCurves at = with(b0, l), db = with(b0 + 1.0, l), dl = with(b0, l + 1.0);
    double a11 = 0, a12 = 0, a22 = 0, r1 = 0, r2 = 0;
    for (size_t i = 0; i < occupancy.size(); ++i) {
      const double p0 = at.PowerW(occupancy[i]);
      const double gb = db.PowerW(occupancy[i]) - p0, gl = dl.PowerW(occupancy[i]) - p0;
      const double r = power[i] - p0;
      a11 += gb * gb;
      a12 += gb * gl;
      a22 += gl * gl;
      r1 += gb * r;
      r2 += gl * r;
    }
    const double det = a11 * a22 - a12 * a12;
    // a11 sums the squared effect of the level on each pair: positive unless nothing paired.
    if (a11 > 0.0 && std::abs(det) > 1e-9 * std::max(1.0, a11 * a22)) {
      s.decode.power_w.b0 = b0 + (r1 * a22 - r2 * a12) / det;
      s.decode.power_w.l = l + (a11 * r2 - a12 * r1) / det;
    } else if (a11 > 0.0) {  // one occupancy only: the level moves, the amplitude stays
      s.decode.power_w.b0 = b0 + r1 / a11;
    }
    double sq = 0.0;
    for (size_t i = 0; i < occupancy.size(); ++i) {
      const double e = s.decode.PowerW(occupancy[i]) - power[i];
      sq += e * e;
    }
    out.decode_pairs = occupancy.size();
    out.decode_power_rmse_w = std::sqrt(sq / static_cast<double>(occupancy.size()));
    note("rollout.decode_power_b0", s.decode.power_w.b0, base.decode.power_w.b0,
         fmt::format("least squares on {} (occupancy, power) pairs, RMSE {:.1f} W",
                     occupancy.size(), out.decode_power_rmse_w));
    note("rollout.decode_power_l", s.decode.power_w.l, base.decode.power_w.l, "the same fit");
  }

  // The budget the job ran under.
  std::vector<double> budgets;
  for (const JobSample& x : samples) {
    if (x.budget_w > 0.0) budgets.push_back(x.budget_w);
  }
  if (!budgets.empty()) {
    s.budget_w = std::clamp(MedianOf(budgets), s.budget_range_w.first, s.budget_range_w.second);
    note("budget.default_w", s.budget_w, base.budget_w, "median of the trace's, within range_w");
  }
  return out;
}

}  // namespace headroom::twin
