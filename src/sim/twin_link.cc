#include "telemetry/twin_source.h"

namespace headroom::telemetry {

Result<Sample> TwinSource::Read(double t_s) {
  const double tick_s = twin_.scenario().tick_s;
  while (twin_.t_s() + 0.5 * tick_s <= t_s) twin_.Tick();
  Sample out;
  out.t_s = t_s;
  out.gpus.resize(static_cast<size_t>(gpus()));
  for (size_t g = 0; g < out.gpus.size(); ++g) {
    out.gpus[g].power_w = twin_.smoothed_w()[g];
    out.gpus[g].power_is_average = true;
    out.gpus[g].energy_j = twin_.energy_j() / gpus();  // the job's total, shared evenly
  }
  return out;
}

}  // namespace headroom::telemetry
