// Twin speed: ticks per second per core. The issue asks for >= 5 million for a one-GPU
// scenario; bench/twin_tick_loop.py is the same tick loop written plainly in Python + numpy.
#include <benchmark/benchmark.h>

#include "twin/twin.h"

namespace headroom::bench {
namespace {

void BM_TwinTicks(benchmark::State& state, const char* scenario_name) {
  auto scenario = twin::LoadScenario(scenario_name);
  if (!scenario) {
    state.SkipWithError(scenario.error().message().c_str());
    return;
  }
  twin::Twin twin(*scenario, 1);
  for (auto _ : state) {
    twin.Tick();
    benchmark::DoNotOptimize(twin.power_w().data());
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["gpu_ticks_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * scenario->gpus, benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(BM_TwinTicks, a100_7b_tp1, "a100-7b-tp1");
BENCHMARK_CAPTURE(BM_TwinTicks, a100_7b_tp1_vllm, "a100-7b-tp1-vllm");
BENCHMARK_CAPTURE(BM_TwinTicks, h100_8b_tp1, "h100-8b-tp1");
BENCHMARK_CAPTURE(BM_TwinTicks, a100_72b_tp4, "a100-72b-tp4");
BENCHMARK_CAPTURE(BM_TwinTicks, a100_72b_tp4_grpo, "a100-72b-tp4-grpo");
BENCHMARK_CAPTURE(BM_TwinTicks, h100_8b_ddp_train, "h100-8b-ddp-train");

}  // namespace
}  // namespace headroom::bench
