// The measured curves the twin is built from.
#pragma once

#include <cmath>
#include <span>
#include <vector>

namespace headroom::twin {

// A 4-parameter logistic in x: b0 + l / (1 + exp(-k (x - x0))). ML.ENERGY models decode power
// and throughput this way with x = log2(batch) (mlenergy_data/modeling/logistic.py).
struct Logistic4 {
  double b0 = 0.0;
  double l = 0.0;
  double x0 = 0.0;
  double k = 1.0;

  double operator()(double x) const { return b0 + l / (1.0 + std::exp(-k * (x - x0))); }
};

// Decode power per GPU and throughput per engine against occupancy n (sequences in flight).
// Measured from n_min up (ML.ENERGY's lowest batch is 8). Below it decode is memory-bound: every
// step streams all the weights whatever n is, so a step's time is t(n) = t0 + c n and its
// energy above idle-with-the-model-loaded is X(n) = e0 + e1 n, both linear in n and continued
// from the curves at n_min with their value and slope; then power P(n) = idle_loaded + X(n) /
// t(n) and throughput n / t(n) (docs/TWIN.md, "Below the lowest measured batch"). Between 0 and
// 1 in flight the engine steps that fraction of the time: power runs linearly from idle_loaded.
struct DecodeCurves {
  Logistic4 power_w;       // per GPU, x = log2 n
  Logistic4 tokens_per_s;  // per engine, x = log2 n
  double n_min = 8.0;      // lowest measured occupancy
  double idle_loaded_w = 0.0;

  double PowerW(double n) const;
  double TokensPerS(double n) const;

  // The memory-bound continuation below n_min (per GPU; time in seconds per step).
  struct MemoryBound {
    double t0_s = 0.0;  // step time with nothing in flight (the weights streamed)
    double c_s = 0.0;   // step time added per sequence
    double e0_j = 0.0;  // step energy above idle_loaded with nothing in flight
    double e1_j = 0.0;  // step energy added per sequence
  };
  MemoryBound Below() const;

 private:
  // Below(), remembered per thread for the parameters it was last computed from (the tick loop
  // asks on every tick of a straggler tail; scenarios are shared by evaluation threads).
  MemoryBound BelowCached() const;
};
// How a hardware power limit slows a phase: GPUs lower their SM clock until the phase's power
// fits, and the phase takes longer. Points (power fraction of full-clock power, time factor)
// from the Perseus A100 profile, sorted by falling power fraction.
class ClockCurve {
 public:
  struct Point {
    double power_fraction;
    double time_factor;
  };
  ClockCurve() = default;
  explicit ClockCurve(std::vector<Point> points);

  // The time factor (>= 1) at which a phase drawing full_power_w fits under limit_w, and the
  // power it then draws (limit_w, or the lowest clock's power when even that is above).
  struct Effect {
    double time_factor = 1.0;
    double power_w = 0.0;
  };
  Effect Apply(double full_power_w, double limit_w) const;
  bool empty() const { return points_.empty(); }
  const std::vector<Point>& points() const { return points_; }

 private:
  std::vector<Point> points_;
};

}  // namespace headroom::twin
