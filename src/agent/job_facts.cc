#include "agent/job_facts.h"

#include <fmt/format.h>

#include <cmath>

namespace headroom::agent {

std::optional<double> LowestEnforcedLimitW(telemetry::NvmlSource& nvml) {
  auto first = nvml.Read(0.0);
  if (!first) return std::nullopt;
  double lowest_w = 0.0;
  for (const auto& g : first->gpus) {
    if (g.power_limit_w && (lowest_w == 0.0 || *g.power_limit_w < lowest_w)) {
      lowest_w = *g.power_limit_w;
    }
  }
  if (!(lowest_w > 0.0)) return std::nullopt;
  return lowest_w;
}

std::optional<std::pair<double, double>> MeanLimitRangeW(telemetry::NvmlSource& nvml,
                                                         const Logger& log) {
  const int gpus = nvml.gpus();
  double lo_sum = 0.0, hi_sum = 0.0;
  for (int g = 0; g < gpus; ++g) {
    auto r = nvml.PowerLimitRangeW(g);
    if (!r) {
      log.Warn(fmt::format("site: {}", r.error().message()));
      return std::nullopt;
    }
    lo_sum += r->first;
    hi_sum += r->second;
  }
  if (gpus <= 0) return std::nullopt;
  return std::pair{lo_sum / gpus, hi_sum / gpus};
}

std::optional<double> MeanPowerW(telemetry::Source& source) {
  auto sample = source.Read(0.0);
  if (!sample || sample->gpus.empty()) return std::nullopt;
  double sum_w = 0.0;
  for (const auto& g : sample->gpus) {
    if (!g.power_w || !std::isfinite(*g.power_w)) return std::nullopt;
    sum_w += *g.power_w;
  }
  return sum_w / static_cast<double>(sample->gpus.size());
}

telemetry::NodeOverhead OpenNodeOverhead(std::optional<double> constant_w, double t_s,
                                         const Logger& log) {
  if (constant_w) return telemetry::NodeOverhead::Constant(*constant_w);
  auto reader = telemetry::PowercapReader::Open();
  if (!reader) {
    log.Warn(fmt::format("node overhead 0 W: {} (--node-overhead-w sets one)",
                         reader.error().message()));
    return telemetry::NodeOverhead::Constant(0.0);
  }
  auto o = telemetry::NodeOverhead::Powercap(std::move(*reader), t_s);
  if (!o) {
    log.Warn(
        fmt::format("node overhead 0 W: {} (--node-overhead-w sets one)", o.error().message()));
    return telemetry::NodeOverhead::Constant(0.0);
  }
  return std::move(*o);
}

}  // namespace headroom::agent
