#pragma once
// The report files of a `headroom diloco` run (docs/DILOCO.md, "Accounting"), written and read
// here only:
//   - a worker's report, <out>/<name>.json (what `worker --json` prints): the run's totals as
//     the worker saw them, and `worker`, its own time, CPU and events;
//   - the run's summary, <out>/summary.json (what `local --json` prints): the totals over every
//     worker's report, `workers_detail` (a row per worker) and the run's own figures.
// Every key written is required on read (common/json_fields.h): a key missing or of the wrong
// type is one line naming it and the file, never a 0. scripts/diloco_results.py reads the
// same keys.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace headroom::diloco {

inline constexpr double kLn2 = 0.69314718055994530942;  // nats to bits

struct LossPoint {
  std::uint64_t tokens = 0;
  double val_loss = 0.0;
  // Not in the report files: the round it follows and when it was measured (seconds since the
  // run's or the worker's start), where the writer knows them; -1: not known.
  int round = -1;
  double at_s = -1.0;
};

// The energy model (docs/DILOCO.md, "Energy to a target loss"): every figure here is modelled,
// not measured; the CLI's flags of the same names set them.
inline constexpr double kDefaultCpuWattsPerCore = 10.0;  // a server core busy
// A worker's machine share while it waits for its peers: a core idle at about a third of busy
// (an assumption, not a measurement: these machines have no RAPL counters).
inline constexpr double kDefaultIdleWattsPerWorker = 3.0;
// Between datacentres, 2024 equipment: ten core routers at 2 W/Gbps and twenty transceivers at
// 0.09 W/Gbps = 21.8 W/Gbps (arXiv 2504.14022), the same path as sites-sim's wan_j_per_byte.
inline constexpr double kDefaultNetworkJPerByte = 21.8e-9 * 8.0;
// The internet's average in 2015, access networks included (Aslan et al. 2018): the old
// default, now the top of the documented range.
inline constexpr double kAslan2015NetworkJPerByte = 0.06 * 3.6e6 / 1e9;

struct EnergyModel {
  double cpu_watts_per_core = kDefaultCpuWattsPerCore;
  double idle_watts_per_worker = kDefaultIdleWattsPerWorker;
  double network_j_per_byte = kDefaultNetworkJPerByte;
};

// What the model is applied to, all measured: CPU seconds computing and otherwise, seconds
// waiting (summed over workers), bytes sent.
struct EnergyInputs {
  double compute_cpu_s = 0.0;
  double other_cpu_s = 0.0;
  double wait_s = 0.0;
  std::uint64_t bytes_sent = 0;
};

// energy_j: compute = compute CPU s x W/core; network = bytes x J/byte; idle = waiting s x idle
// W; other_cpu = the other CPU s x W/core; coordination = network + idle + other_cpu.
struct EnergyJ {
  double compute = 0.0;
  double network = 0.0;
  double idle = 0.0;
  double other_cpu = 0.0;
  double coordination() const { return network + idle + other_cpu; }
  double total() const { return compute + coordination(); }
};
EnergyJ EnergyOf(const EnergyInputs& in, const EnergyModel& model);

// to_target: tokens, wall time and energy until the validation loss first reached target_loss.
struct ToTarget {
  double target_loss = 0.0;
  bool reached = false;
  std::uint64_t tokens = 0;
  double wall_s = 0.0;
  double energy_j = 0.0;
};
// The first point of `curve` at or below `target_loss`: its tokens, its at_s, and the run's
// energy pro-rated by wall time (at_s / run_wall_s: CPU seconds are counted per run, not per
// round). A point without at_s counts the whole run's time. Not reached: reached = false and
// the whole run's tokens, wall time and energy (a lower bound).
ToTarget ToTargetOf(const std::vector<LossPoint>& curve, double target_loss,
                    std::uint64_t run_tokens, double run_wall_s, double run_energy_j);

// The totals every report starts with (a worker's view of the run, or the run's).
struct RunTotals {
  std::string run;
  std::string mode;  // "diloco" or "ddp"
  int workers = 0;
  int rounds = 0;
  int inner_steps = 0;
  std::uint64_t tokens = 0;      // in accepted contributions
  double final_val_loss = -1.0;  // nats/byte; also written as val_bits_per_byte
  std::uint64_t bytes_sent_total = 0;
  int membership_changes = 0;
  int evictions = 0;
  bool hashes_agreed = true;
  double overhead_fraction = 0.0;  // 1 - compute s / busy s
  EnergyJ energy_j;
  std::vector<LossPoint> loss_curve;
  std::optional<ToTarget> to_target;  // absent: no --target-loss (no key)
};

// A worker's seconds by phase (they sum to wall).
struct PhaseSeconds {
  double compute = 0, communicate = 0, wait = 0, recover = 0, throttled = 0, wall = 0;
};

// A worker's report: the totals as it saw them, and `worker`.
struct WorkerReportFile {
  RunTotals totals;
  std::string name;
  std::string member;  // hex lease id
  int rounds_contributed = 0;
  int resyncs = 0;
  int leaves = 0;
  std::uint64_t bytes_received = 0;
  PhaseSeconds seconds;
  double compute_cpu_s = 0.0;  // cpu_seconds.compute
  double other_cpu_s = 0.0;    // cpu_seconds.other
  std::vector<std::string> log;
  std::string checkpoint;  // the model it wrote, when it was the last donor ("": none, no key)
};

// A row of the run's summary per worker that left a report.
struct WorkerRow {
  std::string name;
  PhaseSeconds seconds;
  std::uint64_t bytes_sent = 0;
  int rounds_contributed = 0;
  int resyncs = 0;
  int leaves = 0;
};

// A worker SIGKILLed on purpose (`local --churn`), and how the run went on.
struct ChurnFigures {
  std::string killed;
  int killed_in_round = -1;
  double next_round_after_s = -1.0;
  int joined_in_round = -1;
};

// The run's summary.
struct RunSummaryFile {
  RunTotals totals;
  double wall_s = 0.0;
  std::vector<double> rounds_done_at_s;
  std::string out;
  std::vector<WorkerRow> workers_detail;
  std::string checkpoint;             // "": none (no key)
  std::optional<ChurnFigures> churn;  // absent: no churn
};

nlohmann::json ToJson(const WorkerReportFile& r);
nlohmann::json ToJson(const RunSummaryFile& s);
// An Input error "WHERE: field 'PATH': WHY" for the first key missing or mistyped.
Result<WorkerReportFile> WorkerReportFromJson(const nlohmann::json& j, std::string_view where);
Result<RunSummaryFile> RunSummaryFromJson(const nlohmann::json& j, std::string_view where);
// A worker's report file; errors name the file (not there, not JSON, a key).
Result<WorkerReportFile> ReadWorkerReport(const std::string& path);

}  // namespace headroom::diloco
