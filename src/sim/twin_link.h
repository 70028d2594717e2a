// Telemetry from the digital twin, advanced to the caller's clock, with its concurrency and
// group size driven by whoever controls it (the agent's own decisions): the whole loop with no
// GPU. Power is the twin's telemetry view (1 s moving average, like NVML's averaged field).
#pragma once

#include <cstdint>

#include "telemetry/source.h"
#include "twin/twin.h"

namespace headroom::telemetry {

class TwinSource final : public Source {
 public:
  TwinSource(const twin::Scenario& scenario, uint64_t seed) : twin_(scenario, seed) {}

  std::string_view name() const override { return "twin"; }
  int gpus() const override { return twin_.scenario().gpus; }
  // Advances the twin tick by tick until its time reaches t_s, then reads it.
  Result<Sample> Read(double t_s) override;

  // The actuators, as a trainer would apply them.
  int SetConcurrency(int c) { return twin_.SetConcurrency(c); }
  int SetGroupSize(int g) { return twin_.SetGroupSize(g); }
  const twin::Twin& twin() const { return twin_; }

 private:
  twin::Twin twin_;
};

}  // namespace headroom::telemetry
