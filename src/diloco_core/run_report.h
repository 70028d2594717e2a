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
};

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
  double compute_j = 0.0;          // energy_j.compute
  double coordination_j = 0.0;     // energy_j.coordination
  std::vector<LossPoint> loss_curve;
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
