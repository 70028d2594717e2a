// The node's power other than its GPUs', for a site power budget: an agent that is a member of a
// site counts it in its demand. Either a configured constant (--node-overhead-w) or the CPU power
// measured by Linux powercap (RAPL energy counters under /sys/class/powercap).
//
// Which powercap zones are counted (Documentation/power/powercap/powercap.rst and
// Documentation/ABI/testing/sysfs-class-powercap in the kernel):
// - Only top-level zones `intel-rapl:N`, never subzones `intel-rapl:N:M`. core and uncore are
//   parts of their package, whose energy the package already contains. dram (a subzone on
//   servers) is memory beside the package, not in it, and is not counted either: the powercap
//   overhead is the CPU packages' (or psys'), and memory, fans, disks and NICs are left to the
//   constant's users. (RAPL's dram energy is a model on many servers.)
// - AMD needs nothing else: since Linux 5.11 the same driver (intel_rapl_common, AMD family 17h
//   and later) exposes AMD's package counters as `intel-rapl:N`; there is no `amd-rapl` control
//   type (amd_energy is a hwmon driver, not powercap). Where no `intel-rapl:N` zone counts, the
//   TPMI driver's `intel-rapl-tpmi:N` zones (same layout, newer Xeons) are used instead; the two
//   families are never added, as both measure the same packages.
// - A zone counts when its `name` starts with "package" (package-0, package-1-die-0) or "psys".
//   psys is the whole platform (SoC and more, where the firmware reports it), which contains the
//   packages: where a psys zone exists it is used alone, else the sum of the package zones.
//
// energy_uj is readable by root only since Linux 5.10 and the stable updates of November 2020
// (CVE-2020-8694): Open fails with the file and the reason when a counted zone cannot be read,
// rather than count part of the node.
//
// Time is injected: Sample(t_s) takes the caller's monotonic clock in seconds; no clock inside.
// Not thread-safe: one caller.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace headroom::telemetry {

class PowercapReader {
 public:
  struct Zone {
    std::string dir;   // the zone's directory, e.g. /sys/class/powercap/intel-rapl:0
    std::string name;  // its name file, e.g. package-0
    uint64_t max_energy_range_uj = 0;
  };

  // Finds the zones to count under root (the class directory, where every zone is an entry) and
  // reads each once. An Error (one line, naming the file and why) when none counts, or when a
  // counted zone's energy_uj or max_energy_range_uj cannot be read or does not parse.
  static Result<PowercapReader> Open(const std::string& root = "/sys/class/powercap");

  // Reads every counted zone's energy_uj and returns the mean power in W since the previous
  // sample: none on the first call, and none (the previous sample kept) when t_s did not advance.
  // A counter lower than before has wrapped once at max_energy_range_uj; a zone wrapping twice
  // between samples is undercounted by one range, so sample well within the wrap time (tens of
  // seconds at the least on current CPUs). A failed read or malformed content is an Error naming
  // the file; the previous sample is kept, and the next good one spans the gap.
  // REQUIRES: t_s is finite and does not decrease between calls.
  Result<std::optional<double>> Sample(double t_s);

  const std::vector<Zone>& zones() const { return zones_; }
  // The counted zones' names joined with '+', e.g. "package-0+package-1" or "psys".
  std::string Describe() const;

 private:
  explicit PowercapReader(std::vector<Zone> zones) : zones_(std::move(zones)) {}

  // Constant after Open.
  std::vector<Zone> zones_;
  // The previous sample: energy per zone, in the order of zones_.
  std::optional<double> last_t_s_;
  std::vector<uint64_t> last_energy_uj_;
};

// The node's non-GPU power: a configured constant or a PowercapReader. Not thread-safe.
class NodeOverhead {
 public:
  // REQUIRES: watts is finite and >= 0 (the CLI checks --node-overhead-w).
  static NodeOverhead Constant(double watts);
  // Takes the reader's first sample at t_s (the agent's start), so the first CurrentW after it
  // is measured; an Error when that sample fails.
  static Result<NodeOverhead> Powercap(PowercapReader reader, double t_s);

  // The constant, or the latest powercap power: 0 W until an interval has been measured; the
  // last good value while reads fail (one warning when they start failing, one when they
  // recover). REQUIRES: t_s is finite and does not decrease between calls.
  double CurrentW(double t_s);
  // "--node-overhead-w" or "powercap:<zones>", e.g. "powercap:package-0+package-1".
  std::string_view from() const { return from_; }
  // Warnings since the last call, each said once.
  std::vector<std::string> TakeWarnings() { return std::exchange(warnings_, {}); }

 private:
  NodeOverhead(double watts, std::optional<PowercapReader> reader, std::string from)
      : watts_(watts), reader_(std::move(reader)), from_(std::move(from)) {}

  double watts_;  // the constant, or the last good powercap value
  std::optional<PowercapReader> reader_;
  std::string from_;
  int64_t failed_reads_ = 0;  // consecutive failed samples
  std::vector<std::string> warnings_;
};

}  // namespace headroom::telemetry
