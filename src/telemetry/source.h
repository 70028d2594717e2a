// Telemetry sources behind one interface: NVML (loaded at run time), a replayed trace, and the
// digital twin. The agent reads one every control interval; what a source cannot measure is
// left empty, never invented.
//
// Time is injected: Read(t_s) takes the caller's clock (seconds since the agent started, real or
// accelerated), so sources hold no clock and tests are exact. Not thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace headroom::telemetry {

struct GpuSample {
  std::optional<double> power_w;        // the instantaneous field where there is one
  bool power_is_average = false;        // true: the driver's averaged power (about 1 s)
  std::optional<double> energy_j;       // cumulative since the driver loaded
  std::optional<double> power_limit_w;  // enforced limit
  std::optional<double> sm_clock_mhz;
  std::optional<double> util_pct;
};

struct Sample {
  double t_s = 0.0;
  std::vector<GpuSample> gpus;
};

class Source {
 public:
  virtual ~Source() = default;
  virtual std::string_view name() const = 0;
  virtual int gpus() const = 0;
  // A failed read (the device is gone, the trace has ended) is an Error; a field a device does
  // not support is an empty optional plus one warning.
  virtual Result<Sample> Read(double t_s) = 0;
  // Warnings since the last call, each said once ("GPU 0: SM clock not supported").
  std::vector<std::string> TakeWarnings() { return std::exchange(warnings_, {}); }

 protected:
  void Warn(std::string message) { warnings_.push_back(std::move(message)); }

 private:
  std::vector<std::string> warnings_;
};

}  // namespace headroom::telemetry
