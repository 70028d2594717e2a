// Telemetry from NVML, loaded with dlopen at run time: headroom builds and runs on machines
// without NVIDIA software, and tests run against a fake library (tests/telemetry/fake_nvml.cc).
//
// Per GPU and read: power (NVML_FI_DEV_POWER_INSTANT through nvmlDeviceGetFieldValues where the
// driver has it, else nvmlDeviceGetPowerUsage, the averaged value — which one is reported),
// total energy, enforced power limit, SM clock, utilisation. Every call's status is checked; an
// unsupported field is warned about once and then left empty; any other failure of a field is
// warned about once per distinct error; a failure to read power at all fails the read.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "telemetry/source.h"

namespace headroom::telemetry {

inline constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";

class NvmlSource final : public Source {
 public:
  // Loads the library (a path or a soname), initialises NVML and enumerates the GPUs: all of
  // them, or those of `indices` (NVML indices, each once), in that order — the job's GPUs when
  // a node runs several jobs. Sample position i is GPU indices[i]; logs name NVML indices.
  static Result<std::unique_ptr<NvmlSource>> Open(const std::string& library = kNvmlLibrary,
                                                  const std::vector<int>& indices = {});
  ~NvmlSource() override;  // nvmlShutdown, dlclose

  std::string_view name() const override { return "nvml"; }
  int gpus() const override { return static_cast<int>(devices_.size()); }
  Result<Sample> Read(double t_s) override;

  // Sets the power limit (W) of the GPU at sample position `gpu`. For --guard-power-limit.
  Status SetPowerLimitW(int gpu, double limit_w);
  // The lowest and highest power limit (W) the GPU at `gpu` takes: a site member's floor with
  // --guard-power-limit, and its nameplate.
  Result<std::pair<double, double>> PowerLimitRangeW(int gpu);
  // The NVML index of each sample position.
  const std::vector<int>& indices() const { return indices_; }

  struct Api;  // the resolved entry points

 private:
  NvmlSource() = default;
  void WarnOnce(int gpu, const std::string& field, int status);

  void* handle_ = nullptr;
  std::unique_ptr<Api> api_;
  std::vector<void*> devices_;
  std::vector<int> indices_;
  std::vector<std::string> warned_;  // "gpu/field/status" already reported
  std::vector<bool> instant_ok_;     // per GPU: the instantaneous field works
};

}  // namespace headroom::telemetry
