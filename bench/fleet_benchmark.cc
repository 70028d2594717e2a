// Fleet composition: trials x copies x grid points.
#include <benchmark/benchmark.h>

#include "bench_data.h"
#include "planning/fleet.h"

namespace headroom::bench {
namespace {

void BM_FleetCompose(benchmark::State& state) {
  // 16 one-GPU copies of a 2-hour 10 Hz job, 100 trials.
  const Series s = SeriesOf(72000);
  trace::CollectingSink::Series samples{s.t_s, s.power_w, {}, {}};
  std::vector<planning::Job> jobs;
  jobs.push_back(std::move(planning::MakeJob("job", 16, {samples}, false, 700.0)).value());
  planning::FleetOptions options;
  options.trials = static_cast<uint32_t>(state.range(0));
  for (auto _ : state) {
    auto r = planning::Compose(jobs, options);
    benchmark::DoNotOptimize(r->oversubscription_factor);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0) * 16 * 72000);
}
BENCHMARK(BM_FleetCompose)->Arg(100)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace headroom::bench
