// `headroom twin calibrate --trace AGENT_TRACE`: a scenario from a real job's agent trace.
//
// An agent trace (docs/AGENT.md) has, per sample, every GPU's power, the trainer's phase and
// step, the tokens generated since the previous sample and the actuation in force (concurrency,
// group size). What it cannot show — the model's shape, the GPU's memory and nameplate, the
// prompts per step and their length, the power-limit curve, the ranges — comes from a base
// scenario (what the user knows of the job). Measured from the trace (docs/TWIN.md,
// "Calibrating your own machine"):
//
// - per step, each phase's duration (samples in the phase x the sample interval) and the
//   completions generated (the tokens column summed over the step);
// - log-prob and update throughput: the step's tokens (completions + sequences x prompt tokens)
//   x passes over the phase's GPU-seconds, as the twin computes those durations;
// - sync (and checkpoint) duration;
// - completion lengths: the lognormal median whose mean capped at max_new_tokens (base sigma)
//   equals the measured mean completion;
// - log-prob, update and sync power: the median of a phase's settled samples (after the
//   telemetry window and three time constants), or for a phase too short to settle its last
//   sample with the first-order lag taken out;
// - decode throughput: a scale on the base curve from each rollout's first full interval (every
//   sequence in flight: occupancy = min(concurrency, sequences)); occupancy of every later
//   interval from its tokens, through that curve;
// - decode power: the base curve's level and amplitude (b0, l) by least squares on (occupancy,
//   power a lag later) pairs, the shape (x0, k, the lowest measured batch) kept;
// - the budget: the trace's median, within the base's range.
// The dynamics (time constants, noise) stay the base's: `--fit-dynamics` fits them from a trace
// with steady concurrency levels.
#pragma once

#include <string>
#include <vector>

#include "common/error.h"
#include "common/phase.h"
#include "twin/scenario.h"

namespace headroom::twin {

// One sample time of the job: power averaged over its GPUs.
struct JobSample {
  double t_s = 0.0;
  double power_w = 0.0;  // mean per GPU
  Phase phase = Phase::kIdle;
  int step = 0;
  double tokens = 0.0;  // generated since the previous sample
  double concurrency = 0.0;
  double group_size = 0.0;
  double budget_w = 0.0;  // 0: none recorded
};

struct CalibratedValue {
  std::string key;  // the scenario key, table.key
  double value = 0.0;
  double base = 0.0;
  std::string how;
};

struct TraceCalibration {
  Scenario scenario;
  int steps = 0;            // complete steps measured
  double interval_s = 0.0;  // the trace's sample interval
  size_t decode_pairs = 0;  // (occupancy, power) pairs in the decode power fit
  double decode_power_rmse_w = 0.0;
  std::vector<CalibratedValue> values;
};

inline constexpr int kMinCalibrationSteps = 3;

// Samples in time order. Fails, naming what is missing, with fewer than kMinCalibrationSteps
// complete steps, no rollout, or a base without a rollout.
Result<TraceCalibration> CalibrateFromTrace(const std::vector<JobSample>& samples,
                                            const Scenario& base, const std::string& name);

// The mean of a lognormal (median m, sigma) capped at `cap`; and the median whose capped mean is
// `mean` (bisection; the cap's own value when the mean is at or above it).
double CappedLognormalMean(double median, double sigma, double cap);
double MedianForCappedMean(double mean, double sigma, double cap);

}  // namespace headroom::twin
