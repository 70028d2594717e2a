// Fuzzes scenario parsing and, for scenarios that load, a few hundred twin ticks with every
// actuator moved: whatever loads must simulate without crashing, hanging or going non-finite.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "twin/scenario.h"
#include "twin/twin.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto scenario = headroom::twin::ParseScenario(text, "fuzz.toml");
  if (!scenario.ok()) return 0;
  if (scenario->gpus > 64) return 0;  // keep each input cheap
  headroom::twin::Twin twin(*scenario, size);
  for (int tick = 0; tick < 300; ++tick) {
    if (tick == 100) twin.SetConcurrency(1);
    if (tick == 150) twin.SetGroupSize(1 << 20);
    if (tick == 200) twin.SetPowerLimit(scenario->nameplate_w / 2);
    twin.Tick();
    for (double p : twin.power_w()) {
      if (!std::isfinite(p) || p < 0.0) std::abort();
    }
  }
  if (!std::isfinite(twin.energy_j()) || !std::isfinite(twin.tokens_total())) std::abort();
  return 0;
}
