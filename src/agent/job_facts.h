// What the agent reads of the job's machine at start: the GPUs' power limits and power, the
// node's other power. Each read once, before the loop; a value that cannot be read is none.
#pragma once

#include <optional>
#include <utility>

#include "common/log.h"
#include "telemetry/nvml_source.h"
#include "telemetry/powercap.h"
#include "telemetry/source.h"

namespace headroom::agent {

// The lowest enforced power limit of the GPUs (--source nvml without --budget-w); none unread.
std::optional<double> LowestEnforcedLimitW(telemetry::NvmlSource& nvml);

// The GPUs' power limit range, averaged per GPU; none when any GPU's cannot be read (each failure
// said on `log`).
std::optional<std::pair<double, double>> MeanLimitRangeW(telemetry::NvmlSource& nvml,
                                                         const Logger& log);

// The GPUs' mean power now; none when any GPU has no finite reading.
std::optional<double> MeanPowerW(telemetry::Source& source);

// The node's other power: `constant_w` when given, else the CPU packages' from powercap where
// readable (first sample at `t_s`), else 0 W with a warning.
telemetry::NodeOverhead OpenNodeOverhead(std::optional<double> constant_w, double t_s,
                                         const Logger& log);

}  // namespace headroom::agent
