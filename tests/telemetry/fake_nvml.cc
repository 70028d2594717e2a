// A fake libnvidia-ml.so for tests: the entry points NvmlSource uses, serving scripted values
// and scripted errors, plus fake_nvml_* functions to script them. Not NVIDIA code: the ABI is
// re-declared from the documented API.
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr int kMaxGpus = 8;
struct Gpu {
  unsigned instant_mw = 0;
  unsigned average_mw = 0;
  unsigned long long energy_mj = 0;
  unsigned limit_mw = 400000;
  unsigned sm_mhz = 1410;
  unsigned util = 0;
  unsigned min_limit_mw = 100000;  // after the fields fake_nvml_gpu sets in order
  unsigned max_limit_mw = 400000;
};
struct State {
  int gpus = 1;
  int init_status = 0;
  int instant_status = 0;  // per-field status inside nvmlFieldValue_t
  int power_status = 0;
  int energy_status = 0;
  int limit_status = 0;
  int clock_status = 0;
  int util_status = 0;
  int set_limit_status = 0;
  int initialised = 0;
  Gpu gpu[kMaxGpus];
} state;

struct FieldValue {
  unsigned int field_id;
  unsigned int scope_id;
  long long timestamp;
  long long latency_us;
  int value_type;
  int status;
  union {
    double d;
    unsigned int ui;
    unsigned long long ull;
  } value;
};
struct Utilization {
  unsigned int gpu;
  unsigned int memory;
};

int Index(void* device) { return static_cast<int>(reinterpret_cast<long>(device)) - 1; }

}  // namespace

extern "C" {

// Scripting.
void fake_nvml_reset(int gpus) {
  state = State();
  state.gpus = gpus;
}
void fake_nvml_status(const char* call, int status) {
  if (std::strcmp(call, "init") == 0) state.init_status = status;
  if (std::strcmp(call, "instant") == 0) state.instant_status = status;
  if (std::strcmp(call, "power") == 0) state.power_status = status;
  if (std::strcmp(call, "energy") == 0) state.energy_status = status;
  if (std::strcmp(call, "limit") == 0) state.limit_status = status;
  if (std::strcmp(call, "clock") == 0) state.clock_status = status;
  if (std::strcmp(call, "util") == 0) state.util_status = status;
  if (std::strcmp(call, "set_limit") == 0) state.set_limit_status = status;
}
void fake_nvml_gpu(int i, unsigned instant_mw, unsigned average_mw, unsigned long long energy_mj,
                   unsigned limit_mw, unsigned sm_mhz, unsigned util) {
  state.gpu[i] = {instant_mw, average_mw, energy_mj, limit_mw, sm_mhz, util};
}
unsigned fake_nvml_limit_mw(int i) { return state.gpu[i].limit_mw; }
int fake_nvml_initialised() { return state.initialised; }

// The NVML entry points.
//
// For a separate process (the CLI tests), the environment scripts the fake at init:
// FAKE_NVML_GPUS, FAKE_NVML_POWER_MW (every GPU, instantaneous and average), FAKE_NVML_LIMIT_MW,
// and FAKE_NVML_LIMIT_LOG, a file to which every power-limit change is appended ("GPU MW").
// FAKE_NVML_LIMITS_FILE makes the limits outlive the process, as a real GPU's do: read at init
// when the file exists (one "MW" per GPU, space-separated), rewritten on every change.
namespace {
void SaveLimits() {
  const char* path = std::getenv("FAKE_NVML_LIMITS_FILE");
  if (path == nullptr) return;
  if (std::FILE* f = std::fopen(path, "w")) {
    for (int i = 0; i < state.gpus && i < kMaxGpus; ++i)
      std::fprintf(f, "%u ", state.gpu[i].limit_mw);
    std::fprintf(f, "\n");
    std::fclose(f);
  }
}
}  // namespace

int nvmlInit_v2() {
  if (const char* g = std::getenv("FAKE_NVML_GPUS")) {
    state.gpus = std::atoi(g);
    const char* p = std::getenv("FAKE_NVML_POWER_MW");
    const char* l = std::getenv("FAKE_NVML_LIMIT_MW");
    for (int i = 0; i < state.gpus && i < kMaxGpus; ++i) {
      if (p != nullptr) state.gpu[i].instant_mw = state.gpu[i].average_mw = unsigned(std::atoi(p));
      if (l != nullptr) state.gpu[i].limit_mw = unsigned(std::atoi(l));
    }
    if (const char* path = std::getenv("FAKE_NVML_LIMITS_FILE")) {
      if (std::FILE* f = std::fopen(path, "r")) {
        for (int i = 0; i < state.gpus && i < kMaxGpus; ++i) {
          if (std::fscanf(f, "%u", &state.gpu[i].limit_mw) != 1) break;
        }
        std::fclose(f);
      }
    }
  }
  if (state.init_status == 0) ++state.initialised;
  return state.init_status;
}
int nvmlShutdown() {
  --state.initialised;
  return 0;
}
const char* nvmlErrorString(int status) {
  switch (status) {
    case 3:
      return "Not Supported";
    case 15:
      return "GPU is lost";
    case 999:
      return "Unknown Error";
    default:
      return "Error";
  }
}
int nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = static_cast<unsigned>(state.gpus);
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void** device) {
  *device = reinterpret_cast<void*>(static_cast<long>(i) + 1);
  return 0;
}
int nvmlDeviceGetFieldValues(void* device, int count, FieldValue* values) {
  for (int k = 0; k < count; ++k) {
    values[k].status = values[k].field_id == 186 ? state.instant_status : 3;
    values[k].value_type = 1;
    values[k].value.ui = state.gpu[Index(device)].instant_mw;
  }
  return 0;
}
int nvmlDeviceGetPowerUsage(void* device, unsigned int* mw) {
  *mw = state.gpu[Index(device)].average_mw;
  return state.power_status;
}
int nvmlDeviceGetTotalEnergyConsumption(void* device, unsigned long long* mj) {
  *mj = state.gpu[Index(device)].energy_mj;
  return state.energy_status;
}
int nvmlDeviceGetEnforcedPowerLimit(void* device, unsigned int* mw) {
  *mw = state.gpu[Index(device)].limit_mw;
  return state.limit_status;
}
int nvmlDeviceGetClockInfo(void* device, int type, unsigned int* mhz) {
  *mhz = type == 1 ? state.gpu[Index(device)].sm_mhz : 0;
  return state.clock_status;
}
int nvmlDeviceGetUtilizationRates(void* device, Utilization* u) {
  u->gpu = state.gpu[Index(device)].util;
  u->memory = 0;
  return state.util_status;
}
int nvmlDeviceGetPowerManagementLimitConstraints(void* device, unsigned int* min_mw,
                                                 unsigned int* max_mw) {
  *min_mw = state.gpu[Index(device)].min_limit_mw;
  *max_mw = state.gpu[Index(device)].max_limit_mw;
  return state.limit_status;
}
int nvmlDeviceSetPowerManagementLimit(void* device, unsigned int mw) {
  if (state.set_limit_status == 0) {
    state.gpu[Index(device)].limit_mw = mw;
    if (const char* log = std::getenv("FAKE_NVML_LIMIT_LOG")) {
      if (std::FILE* f = std::fopen(log, "a")) {
        std::fprintf(f, "%d %u\n", Index(device), mw);
        std::fclose(f);
      }
    }
    SaveLimits();
  }
  return state.set_limit_status;
}

}  // extern "C"
