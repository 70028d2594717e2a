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
// Measured from n_min up (ML.ENERGY's lowest batch is 8); below it, throughput is proportional
// to n and power is interpolated on log2(1 + n) between idle-with-the-model-loaded (n = 0) and
// the curve at n_min (the CATALOGUE's recipe; an assumption, not a measurement).
struct DecodeCurves {
  Logistic4 power_w;       // per GPU, x = log2 n
  Logistic4 tokens_per_s;  // per engine, x = log2 n
  double n_min = 8.0;      // lowest measured occupancy
  double idle_loaded_w = 0.0;

  double PowerW(double n) const;
  double TokensPerS(double n) const;
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
