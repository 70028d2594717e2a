#include "telemetry/nvml_source.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace headroom::telemetry {

namespace {

// The NVML ABI this file relies on (documented in NVIDIA's nvml.h; declared here because the
// header is not packaged in Debian main). Only what headroom calls.
using NvmlReturn = int;
constexpr NvmlReturn kSuccess = 0;
constexpr NvmlReturn kNotSupported = 3;
using NvmlDevice = void*;
constexpr int kClockSm = 1;
constexpr unsigned kFieldPowerInstant = 186;  // NVML_FI_DEV_POWER_INSTANT, mW
constexpr int kValueUnsignedInt = 1;

struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};

union NvmlValue {
  double d;
  unsigned int ui;
  unsigned long ul;
  unsigned long long ull;
  long long sll;
  int si;
};

struct NvmlFieldValue {
  unsigned int field_id;
  unsigned int scope_id;
  long long timestamp;
  long long latency_us;
  int value_type;
  NvmlReturn status;
  NvmlValue value;
};

}  // namespace

struct NvmlSource::Api {
  NvmlReturn (*init)();
  NvmlReturn (*shutdown)();
  const char* (*error_string)(NvmlReturn);
  NvmlReturn (*count)(unsigned int*);
  NvmlReturn (*handle_by_index)(unsigned int, NvmlDevice*);
  NvmlReturn (*power_usage)(NvmlDevice, unsigned int*);
  NvmlReturn (*field_values)(NvmlDevice, int, NvmlFieldValue*);
  NvmlReturn (*total_energy)(NvmlDevice, unsigned long long*);
  NvmlReturn (*enforced_limit)(NvmlDevice, unsigned int*);
  NvmlReturn (*clock_info)(NvmlDevice, int, unsigned int*);
  NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*);
  NvmlReturn (*set_limit)(NvmlDevice, unsigned int);
  NvmlReturn (*limit_constraints)(NvmlDevice, unsigned int*, unsigned int*);

  std::string Describe(NvmlReturn status) const {
    const char* text = error_string != nullptr ? error_string(status) : nullptr;
    return text != nullptr ? fmt::format("{} (NVML error {})", text, status)
                           : fmt::format("NVML error {}", status);
  }
};

namespace {

template <class F>
bool Resolve(void* handle, const char* symbol, F* out) {
  *out = reinterpret_cast<F>(dlsym(handle, symbol));
  return *out != nullptr;
}

}  // namespace

Result<std::unique_ptr<NvmlSource>> NvmlSource::Open(const std::string& library,
                                                     const std::vector<int>& indices) {
  std::unique_ptr<NvmlSource> s(new NvmlSource());
  s->handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (s->handle_ == nullptr) {
    const char* why = dlerror();
    return Error::Io(fmt::format("nvml: cannot load {}: {} (is the NVIDIA driver installed?)",
                                 library, why != nullptr ? why : "unknown error"));
  }
  s->api_ = std::make_unique<Api>();
  Api& a = *s->api_;
  const bool required = Resolve(s->handle_, "nvmlInit_v2", &a.init) &&
                        Resolve(s->handle_, "nvmlShutdown", &a.shutdown) &&
                        Resolve(s->handle_, "nvmlDeviceGetCount_v2", &a.count) &&
                        Resolve(s->handle_, "nvmlDeviceGetHandleByIndex_v2", &a.handle_by_index) &&
                        Resolve(s->handle_, "nvmlDeviceGetPowerUsage", &a.power_usage);
  if (!required) {
    return Error::Io(
        fmt::format("nvml: {} lacks a required entry point (nvmlInit_v2, "
                    "nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2, "
                    "nvmlDeviceGetPowerUsage)",
                    library));
  }
  // Optional entry points: older drivers lack some; their fields are then left empty.
  Resolve(s->handle_, "nvmlErrorString", &a.error_string);
  Resolve(s->handle_, "nvmlDeviceGetFieldValues", &a.field_values);
  Resolve(s->handle_, "nvmlDeviceGetTotalEnergyConsumption", &a.total_energy);
  Resolve(s->handle_, "nvmlDeviceGetEnforcedPowerLimit", &a.enforced_limit);
  Resolve(s->handle_, "nvmlDeviceGetClockInfo", &a.clock_info);
  Resolve(s->handle_, "nvmlDeviceGetUtilizationRates", &a.utilization);
  Resolve(s->handle_, "nvmlDeviceSetPowerManagementLimit", &a.set_limit);
  Resolve(s->handle_, "nvmlDeviceGetPowerManagementLimitConstraints", &a.limit_constraints);

  if (const NvmlReturn r = a.init(); r != kSuccess) {
    a.shutdown = nullptr;  // nothing to shut down
    return Error::Io(fmt::format("nvml: nvmlInit failed: {}", a.Describe(r)));
  }
  unsigned int count = 0;
  if (const NvmlReturn r = a.count(&count); r != kSuccess) {
    return Error::Io(fmt::format("nvml: cannot count GPUs: {}", a.Describe(r)));
  }
  if (count == 0) return Error::Io("nvml: no GPU found");
  if (indices.empty()) {
    for (unsigned int i = 0; i < count; ++i) s->indices_.push_back(static_cast<int>(i));
  } else {
    for (size_t k = 0; k < indices.size(); ++k) {
      const int i = indices[k];
      if (i < 0 || i >= static_cast<int>(count)) {
        return Error::Usage(fmt::format(
            "--gpus: GPU {} is not on this node (NVML sees {} GPUs: 0-{})", i, count, count - 1));
      }
      if (std::find(indices.begin(), indices.begin() + static_cast<std::ptrdiff_t>(k), i) !=
          indices.begin() + static_cast<std::ptrdiff_t>(k)) {
        return Error::Usage(fmt::format("--gpus: GPU {} is listed twice", i));
      }
      s->indices_.push_back(i);
    }
  }
  for (const int i : s->indices_) {
    NvmlDevice d = nullptr;
    if (const NvmlReturn r = a.handle_by_index(static_cast<unsigned int>(i), &d); r != kSuccess) {
      return Error::Io(fmt::format("nvml: GPU {}: no handle: {}", i, a.Describe(r)));
    }
    s->devices_.push_back(d);
  }
  s->instant_ok_.assign(s->devices_.size(), a.field_values != nullptr);
  if (a.field_values == nullptr) {
    s->Warn("nvml: nvmlDeviceGetFieldValues missing: power is the driver's averaged value");
  }
  return s;
}

NvmlSource::~NvmlSource() {
  if (api_ && api_->shutdown != nullptr && handle_ != nullptr) api_->shutdown();
  if (handle_ != nullptr) dlclose(handle_);
}

void NvmlSource::WarnOnce(int gpu, const std::string& field, int status) {
  std::string key = fmt::format("{}/{}/{}", gpu, field, status);
  if (std::find(warned_.begin(), warned_.end(), key) != warned_.end()) return;
  warned_.push_back(std::move(key));
  Warn(status == kNotSupported
           ? fmt::format("nvml: GPU {}: {} not supported; left empty", gpu, field)
           : fmt::format("nvml: GPU {}: {}: {}", gpu, field, api_->Describe(status)));
}

Result<Sample> NvmlSource::Read(double t_s) {
  const Api& a = *api_;
  Sample out;
  out.t_s = t_s;
  out.gpus.resize(devices_.size());
  for (size_t i = 0; i < devices_.size(); ++i) {
    const int gpu = indices_[i];  // named by its NVML index
    NvmlDevice d = devices_[i];
    GpuSample& g = out.gpus[i];
    if (instant_ok_[i]) {
      NvmlFieldValue fv;
      std::memset(&fv, 0, sizeof(fv));
      fv.field_id = kFieldPowerInstant;
      const NvmlReturn r = a.field_values(d, 1, &fv);
      const NvmlReturn status = r != kSuccess ? r : fv.status;
      if (status == kSuccess && fv.value_type == kValueUnsignedInt) {
        g.power_w = fv.value.ui / 1000.0;
      } else {
        // Not there (older GPU or driver): fall back to the averaged power from now on.
        instant_ok_[i] = false;
        WarnOnce(gpu, "instantaneous power", status == kSuccess ? kNotSupported : status);
        Warn(fmt::format("nvml: GPU {}: power is the driver's averaged value (about 1 s)", gpu));
      }
    }
    if (!g.power_w) {
      unsigned int mw = 0;
      if (const NvmlReturn r = a.power_usage(d, &mw); r != kSuccess) {
        return Error::Io(fmt::format("nvml: GPU {}: cannot read power: {}", gpu, a.Describe(r)));
      }
      g.power_w = mw / 1000.0;
      g.power_is_average = true;
    }
    if (a.total_energy != nullptr) {
      unsigned long long mj = 0;
      const NvmlReturn r = a.total_energy(d, &mj);
      if (r == kSuccess) {
        g.energy_j = static_cast<double>(mj) / 1000.0;
      } else {
        WarnOnce(gpu, "total energy", r);
      }
    }
    if (a.enforced_limit != nullptr) {
      unsigned int mw = 0;
      const NvmlReturn r = a.enforced_limit(d, &mw);
      if (r == kSuccess) {
        g.power_limit_w = mw / 1000.0;
      } else {
        WarnOnce(gpu, "power limit", r);
      }
    }
    if (a.clock_info != nullptr) {
      unsigned int mhz = 0;
      const NvmlReturn r = a.clock_info(d, kClockSm, &mhz);
      if (r == kSuccess) {
        g.sm_clock_mhz = mhz;
      } else {
        WarnOnce(gpu, "SM clock", r);
      }
    }
    if (a.utilization != nullptr) {
      NvmlUtilization u{0, 0};
      const NvmlReturn r = a.utilization(d, &u);
      if (r == kSuccess) {
        g.util_pct = u.gpu;
      } else {
        WarnOnce(gpu, "utilisation", r);
      }
    }
  }
  return out;
}

Status NvmlSource::SetPowerLimitW(int gpu, double limit_w) {
  if (gpu < 0 || gpu >= gpus()) return Error::Usage(fmt::format("nvml: no GPU {}", gpu));
  if (api_->set_limit == nullptr) {
    return Error::Io("nvml: nvmlDeviceSetPowerManagementLimit missing in this driver");
  }
  const auto mw = static_cast<unsigned int>(std::max(0.0, limit_w) * 1000.0 + 0.5);
  if (const NvmlReturn r = api_->set_limit(devices_[static_cast<size_t>(gpu)], mw); r != kSuccess) {
    return Error::Io(fmt::format("nvml: GPU {}: cannot set the power limit to {:.0f} W: {}",
                                 indices_[static_cast<size_t>(gpu)], limit_w, api_->Describe(r)));
  }
  return OkStatus();
}

Result<std::pair<double, double>> NvmlSource::PowerLimitRangeW(int gpu) {
  if (gpu < 0 || gpu >= gpus()) return Error::Usage(fmt::format("nvml: no GPU {}", gpu));
  if (api_->limit_constraints == nullptr) {
    return Error::Io("nvml: nvmlDeviceGetPowerManagementLimitConstraints missing in this driver");
  }
  unsigned int min_mw = 0, max_mw = 0;
  if (const NvmlReturn r =
          api_->limit_constraints(devices_[static_cast<size_t>(gpu)], &min_mw, &max_mw);
      r != kSuccess) {
    return Error::Io(fmt::format("nvml: GPU {}: cannot read the power limit range: {}",
                                 indices_[static_cast<size_t>(gpu)], api_->Describe(r)));
  }
  if (min_mw == 0 || max_mw < min_mw) {
    return Error::Io(fmt::format("nvml: GPU {}: power limit range [{}, {}] mW is not one",
                                 indices_[static_cast<size_t>(gpu)], min_mw, max_mw));
  }
  return std::pair{min_mw / 1000.0, max_mw / 1000.0};
}

}  // namespace headroom::telemetry
