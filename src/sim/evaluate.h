// `headroom eval`: every controller on the same seeds, scored like the paper's tables.
//
// Horizon `time` (the default): for each seed, the wall time the uncontrolled trainer takes for
// `steps` GRPO steps; every controller then runs exactly that long on that seed, so tokens
// measure throughput and energy is over the same time. Horizon `steps` (the source paper's
// framing): every controller runs exactly `steps` GRPO steps, however long they take, so tokens
// are what those steps generated (a larger group size makes more per step) and energy is over
// each controller's own duration. Static-safe and the PID gains are found by search on separate
// calibration seeds (1001, 1002, ...), never on the evaluation seeds (1, 2, ...).
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "control/baselines.h"
#include "control/policy.h"
#include "sim/budget_plan.h"
#include "sim/episode.h"
#include "twin/scenario.h"

namespace headroom::sim {

inline constexpr std::array<std::string_view, 7> kControllerNames = {
    "uncontrolled", "static-safe",        "power-cap",    "pid",
    "ppo",          "static-safe-lowest", "static-oracle"};
// The two references of a moving budget: the best fixed setting within the target at the
// lowest budget of the schedule (what an operator who must comply would choose), and the
// setting searched for each budget level, switched at each change (an upper reference no real
// system has).
bool NeedsSchedule(std::string_view controller);

struct Stat {
  double mean = 0.0;
  double std = 0.0;  // sample standard deviation (n - 1); 0 for one seed
};
Stat StatOf(const std::vector<double>& v);

// The fixed setting with the most tokens whose mean 0.5 s violation fraction on the calibration
// seeds stays <= the target; when none does, the one with the fewest violations (ties: the most
// tokens).
struct StaticSafe {
  int concurrency = 0;
  int group_size = 0;
  double violation_fraction = 0.0;  // on the calibration seeds
  double tokens = 0.0;
  bool meets_target = false;
};

struct PidChoice {
  control::PidGains gains;
  int group_size = 0;
  double violation_fraction = 0.0;
  double tokens = 0.0;
  bool meets_target = false;
};

enum class Horizon { kTime, kSteps };
Result<Horizon> ParseHorizon(std::string_view text);  // "time" or "steps"
std::string_view HorizonName(Horizon h);

struct EvalConfig {
  twin::Scenario scenario;
  Horizon horizon = Horizon::kTime;
  double budget_w = 0.0;
  int seeds = 10;
  // The episodes are seeds first_seed .. first_seed + seeds - 1 (1: the evaluation seeds;
  // checkpoint selection validates on others, kValidationSeed0).
  uint64_t first_seed = 1;
  int steps = 500;
  std::vector<std::string> controllers;
  const control::Policy* policy = nullptr;  // needed for "ppo"
  double violation_target = 0.01;
  int calibration_seeds = 3;
  int search_steps = 60;
  // A budget that moves, around budget_w (the base); none: budget_w throughout.
  std::optional<BudgetPlanSpec> schedule;
  int threads = 2;
  bool record_power = true;
  // false: only the controllers asked for run -- no uncontrolled and static-safe beside them, no
  // search they do not need, no comparisons (checkpoint selection's validation).
  bool references = true;
  std::function<void(const std::string& what, int done, int total)> progress;
};

struct ControllerEval {
  std::string name;
  std::string setting;  // what it ran with, in words
  std::vector<EpisodeResult> runs;
  std::array<Stat, 3> violation_fraction;
  Stat tokens;
  Stat energy_j;
  Stat tokens_per_mwh;
  Stat mean_concurrency;
  Stat mean_group_size;
  Stat limit_fraction;  // the hardware power limit's use (EpisodeResult)
  Stat limit_depth;
  std::optional<double> tokens_vs_uncontrolled_pct;
  std::optional<double> tokens_vs_static_safe_pct;
  std::optional<double> violations_vs_uncontrolled_pct;
  std::optional<double> tokens_per_mwh_vs_uncontrolled_pct;
  // Under a moving budget: settle_s over every seed's decreases, and tokens against the two
  // references.
  std::optional<analysis::SettleSummary> settle;
  std::optional<double> tokens_vs_static_safe_lowest_pct;
  std::optional<double> tokens_vs_static_oracle_pct;
};

// A budget level and the static setting searched for it (static-oracle).
struct OracleLevel {
  double budget_w = 0.0;
  StaticSafe setting;
};

// The moving budget an evaluation ran under.
struct ScheduleInfo {
  std::string name;  // the generator or the file, as given
  double notice_s = 0.0;
  double lowest_w = 0.0;  // over every seed's schedule, per GPU
  double highest_w = 0.0;
  int changes = 0;  // over every seed
  int decreases = 0;
  int clipped = 0;                                 // levels cut at the scenario's range
  std::vector<analysis::BudgetSchedule> per_seed;  // per GPU
};

struct EvalResult {
  std::string scenario;
  Horizon horizon = Horizon::kTime;
  double budget_w = 0.0;
  int seeds = 0;
  int steps = 0;
  double violation_target = 0.0;
  std::vector<double> horizon_s;  // per seed: the uncontrolled trainer's time for `steps` steps
  StaticSafe static_safe;
  PidChoice pid;
  double pid_target = 0.0;  // what PID was tuned to: the policy's constraint when there is one
  double pid_window_s = 0.5;
  std::optional<ScheduleInfo> schedule;
  std::optional<StaticSafe> static_safe_lowest;  // with a schedule
  std::vector<OracleLevel> oracle;               // with a schedule, lowest level first
  std::vector<ControllerEval> controllers;       // in the order asked
};

// Checkpoint selection's episodes: apart from the evaluation seeds (1, 2, ...) and the
// calibration seeds of the searches (1001, ...).
inline constexpr uint64_t kValidationSeed0 = 2001;

// Checks names and the budget range before anything runs.
Result<EvalResult> Evaluate(const EvalConfig& config);

StaticSafe SearchStaticSafe(const twin::Scenario& scenario, double budget_w, double target,
                            int calibration_seeds, int steps, int threads);
// The gains with the most tokens whose violation fraction over window_s (one of kScoreWindowsS)
// stays <= target on the calibration seeds; when none does, the fewest violations. With a
// schedule, each calibration seed runs under its own plan of it.
PidChoice SearchPid(const twin::Scenario& scenario, double budget_w, double target,
                    int calibration_seeds, int steps, int group_size, int threads,
                    double window_s = 0.5, const BudgetPlanSpec* schedule = nullptr);

// Runs tasks 0..n-1 on `threads` threads (task i writes only its own slot).
void ParallelFor(int n, int threads, const std::function<void(int)>& task);

}  // namespace headroom::sim
