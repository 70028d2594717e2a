#include "sim/evaluate.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <set>
#include <thread>

#include "control/factory.h"
#include "control/features.h"

namespace headroom::sim {

Stat StatOf(const std::vector<double>& v) {
  Stat s;
  if (v.empty()) return s;
  double sum = 0.0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  if (v.size() > 1) {
    double ss = 0.0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.std = std::sqrt(ss / static_cast<double>(v.size() - 1));
  }
  return s;
}

void ParallelFor(int n, int threads, const std::function<void(int)>& task) {
  std::atomic<int> next{0};
  auto worker = [&] {
    for (int i = next++; i < n; i = next++) task(i);
  };
  const int t = std::max(1, std::min(threads, n));
  std::vector<std::thread> pool;
  for (int k = 1; k < t; ++k) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
}

bool NeedsSchedule(std::string_view controller) {
  return controller == "static-safe-lowest" || controller == "static-oracle";
}

Result<Horizon> ParseHorizon(std::string_view text) {
  if (text == "time") return Horizon::kTime;
  if (text == "steps") return Horizon::kSteps;
  return Error::Usage(fmt::format("--horizon: '{}' is not time or steps", text));
}

std::string_view HorizonName(Horizon h) { return h == Horizon::kSteps ? "steps" : "time"; }

namespace {

constexpr uint64_t kCalibrationSeed0 = 1001;
// static-oracle searches at most this many budget levels (the schedule's, or quantiles of them).
constexpr size_t kMaxOracleLevels = 8;
// Horizon `steps`: a run stops at its steps or at this many times the uncontrolled trainer's
// time for them, whichever comes first (a controller that stalls the trainer ends, with fewer
// steps, rather than hanging the evaluation).
constexpr double kStepsHorizonCap = 20.0;

// The setting searched for each budget level, switched as the budget in force moves: the one of
// the highest level at or below it (the lowest level's below them all).
class StaticOracle final : public control::Controller {
 public:
  explicit StaticOracle(std::vector<OracleLevel> levels) : levels_(std::move(levels)) {}
  std::string_view name() const override { return "static-oracle"; }
  control::Command Decide(const control::Inputs& in) override {
    const OracleLevel* pick = &levels_.front();
    for (const OracleLevel& l : levels_) {
      if (l.budget_w <= in.budget_w + 1e-9) pick = &l;
    }
    return {pick->setting.concurrency, pick->setting.group_size, 0.0};
  }

 private:
  std::vector<OracleLevel> levels_;  // ascending budget
};

// Each calibration seed's plan of the schedule, over its horizon.
std::vector<analysis::BudgetSchedule> CalibrationPlans(const twin::Scenario& s, double budget_w,
                                                       const BudgetPlanSpec& schedule,
                                                       const std::vector<double>& horizons) {
  std::vector<analysis::BudgetSchedule> plans;
  for (size_t i = 0; i < horizons.size(); ++i) {
    plans.push_back(MakeBudgetPlan(schedule, budget_w, s.budget_range_w, horizons[i],
                                   kCalibrationSeed0 + i, s.interval_s)
                        .per_gpu_w);
  }
  return plans;
}

// The duration of `steps` uncontrolled steps on each seed.
std::vector<double> Horizons(const twin::Scenario& s, double budget_w, uint64_t seed0, int seeds,
                             int steps, int threads) {
  std::vector<double> h(static_cast<size_t>(seeds));
  ParallelFor(seeds, threads, [&](int i) {
    control::Uncontrolled u(s.concurrency, s.group_size);
    EpisodeOptions o;
    o.steps = steps;
    h[static_cast<size_t>(i)] =
        RunEpisode(s, budget_w, seed0 + static_cast<uint64_t>(i), u, o).duration_s;
  });
  return h;
}

struct Score {
  double tokens = 0.0;
  double violation = 0.0;
};

// window: index into kScoreWindowsS of the violation fraction the target applies to.
template <class Make>
Score ScoreOn(const twin::Scenario& s, double budget_w, const std::vector<double>& horizons,
              size_t window, Make make,
              const std::vector<analysis::BudgetSchedule>* plans = nullptr) {
  Score sc;
  for (size_t i = 0; i < horizons.size(); ++i) {
    auto c = make();
    EpisodeOptions o;
    o.horizon_s = horizons[i];
    if (plans != nullptr) o.budget = &(*plans)[i];
    const EpisodeResult r = RunEpisode(s, budget_w, kCalibrationSeed0 + i, *c, o);
    sc.tokens += r.tokens / static_cast<double>(horizons.size());
    sc.violation += r.violation_fraction[window] / static_cast<double>(horizons.size());
  }
  return sc;
}

// The index of the best score: the most tokens among those within the target; if none is, the
// fewest violations, ties to the most tokens. REQUIRES: scores not empty.
size_t Best(const std::vector<Score>& scores, double target) {
  size_t best = 0;
  for (size_t k = 1; k < scores.size(); ++k) {
    const Score& a = scores[k];
    const Score& b = scores[best];
    const bool a_meets = a.violation <= target;
    const bool b_meets = b.violation <= target;
    bool better;
    if (a_meets != b_meets) {
      better = a_meets;
    } else if (a_meets) {
      better = a.tokens > b.tokens;
    } else {
      better = a.violation < b.violation || (a.violation == b.violation && a.tokens > b.tokens);
    }
    if (better) best = k;
  }
  return best;
}

}  // namespace

StaticSafe SearchStaticSafe(const twin::Scenario& s, double budget_w, double target,
                            int calibration_seeds, int steps, int threads) {
  const std::vector<double> horizons =
      Horizons(s, budget_w, kCalibrationSeed0, calibration_seeds, steps, threads);
  const control::ActuatorLimits limits = LimitsOf(s);
  std::set<int> cs{limits.concurrency.Clamp(s.concurrency)};
  std::set<int> gs{limits.group_size.Clamp(s.group_size)};
  for (int i = 0; i < control::kConcurrencyLevels; ++i) {
    cs.insert(control::ConcurrencyAtLevel(limits.concurrency, i));
  }
  for (int i = 0; i < control::kGroupLevels; ++i)
    gs.insert(control::GroupAtLevel(limits.group_size, i));
  std::vector<std::pair<int, int>> grid;
  for (int c : cs) {
    for (int g : gs) grid.emplace_back(c, g);
  }
  std::vector<Score> scores(grid.size());
  ParallelFor(static_cast<int>(grid.size()), threads, [&](int k) {
    // Plain copies, not structured bindings: clang (the fuzz build) cannot capture those.
    const int c = grid[static_cast<size_t>(k)].first;
    const int g = grid[static_cast<size_t>(k)].second;
    scores[static_cast<size_t>(k)] = ScoreOn(s, budget_w, horizons, 0, [&] {
      return std::make_unique<control::Static>("static", c, g);
    });
  });
  const size_t k = Best(scores, target);
  return {grid[k].first, grid[k].second, scores[k].violation, scores[k].tokens,
          scores[k].violation <= target};
}

PidChoice SearchPid(const twin::Scenario& s, double budget_w, double target, int calibration_seeds,
                    int steps, int group_size, int threads, double window_s,
                    const BudgetPlanSpec* schedule) {
  size_t window = 0;
  for (size_t i = 0; i < kScoreWindowsS.size(); ++i) {
    if (std::abs(kScoreWindowsS[i] - window_s) < 1e-9) window = i;
  }
  const std::vector<double> horizons =
      Horizons(s, budget_w, kCalibrationSeed0, calibration_seeds, steps, threads);
  std::vector<analysis::BudgetSchedule> plans;
  if (schedule != nullptr) plans = CalibrationPlans(s, budget_w, *schedule, horizons);
  const control::Range range{s.concurrency_range.lo, s.concurrency_range.hi};
  std::vector<control::PidGains> grid;
  for (double kp : {0.5, 1.0, 2.0, 4.0, 8.0}) {
    for (double ki : {0.1, 0.3, 1.0, 3.0}) {
      for (double margin : {0.0, 0.03, 0.06, 0.1, 0.15}) grid.push_back({kp, ki, margin, {}});
    }
  }
  std::vector<Score> scores(grid.size());
  ParallelFor(static_cast<int>(grid.size()), threads, [&](int k) {
    scores[static_cast<size_t>(k)] = ScoreOn(
        s, budget_w, horizons, window,
        [&] {
          return std::make_unique<control::Pid>(grid[static_cast<size_t>(k)], range, s.concurrency,
                                                group_size, s.nameplate_w, s.power_limit_min_w);
        },
        schedule != nullptr ? &plans : nullptr);
  });
  const size_t k = Best(scores, target);
  return {grid[k], group_size, scores[k].violation, scores[k].tokens,
          scores[k].violation <= target};
}

Result<EvalResult> Evaluate(const EvalConfig& config) {
  const twin::Scenario& s = config.scenario;
  if (!s.has_rollout) {
    return Error::Usage(fmt::format(
        "scenario '{}' has no rollout: the controllers steer generation, there is none to steer",
        s.name));
  }
  for (const std::string& name : config.controllers) {
    if (std::find(kControllerNames.begin(), kControllerNames.end(), name) ==
        kControllerNames.end()) {
      return Error::Usage(
          fmt::format("--controllers: unknown controller '{}' (known: uncontrolled, static-safe, "
                      "power-cap, pid, ppo)",
                      name));
    }
    if (name == "ppo" && config.policy == nullptr) {
      return Error::Usage("--controllers: 'ppo' needs --policy FILE");
    }
    if (NeedsSchedule(name) && !config.schedule) {
      return Error::Usage(fmt::format(
          "--controllers: '{}' is a reference for a moving budget: give --budget-schedule", name));
    }
  }
  EvalResult out;
  out.scenario = s.name;
  out.budget_w = config.budget_w;
  out.seeds = config.seeds;
  out.steps = config.steps;
  out.horizon = config.horizon;
  out.violation_target = config.violation_target;
  auto progress = [&](const std::string& what, int done, int total) {
    if (config.progress) config.progress(what, done, total);
  };

  progress("horizons", 0, 1);
  out.horizon_s =
      Horizons(s, config.budget_w, config.first_seed, config.seeds, config.steps, config.threads);
  const int search_steps = std::min(config.steps, config.search_steps);
  const BudgetPlanSpec* schedule = config.schedule ? &*config.schedule : nullptr;
  if (schedule != nullptr) {
    ScheduleInfo info;
    info.name = schedule->text;
    bool first = true;
    for (int i = 0; i < config.seeds; ++i) {
      BudgetPlan plan = MakeBudgetPlan(*schedule, config.budget_w, s.budget_range_w,
                                       out.horizon_s[static_cast<size_t>(i)],
                                       config.first_seed + static_cast<uint64_t>(i), s.interval_s);
      info.notice_s = plan.notice_s;
      info.clipped += plan.clipped;
      const analysis::BudgetSchedule& b = plan.per_gpu_w;
      info.lowest_w = first ? b.MinW() : std::min(info.lowest_w, b.MinW());
      info.highest_w = first ? b.MaxW() : std::max(info.highest_w, b.MaxW());
      first = false;
      info.changes += static_cast<int>(b.points().size()) - 1;
      info.decreases += static_cast<int>(b.DecreasesAt().size());
      info.per_seed.push_back(std::move(plan.per_gpu_w));
    }
    // A policy acts only where it was trained (as the agent and a fixed budget).
    const auto [lo_w, hi_w] = s.budget_range_w;
    if (config.policy != nullptr &&
        std::find(config.controllers.begin(), config.controllers.end(), "ppo") !=
            config.controllers.end() &&
        (info.lowest_w < lo_w - 1e-9 || info.highest_w > hi_w + 1e-9)) {
      return Error::Usage(fmt::format(
          "--budget-schedule '{}': budgets {:.1f}-{:.1f} W per GPU leave scenario '{}''s budget "
          "range [{}, {}] W, where the policy was trained",
          info.name, info.lowest_w, info.highest_w, s.name, lo_w, hi_w));
    }
    out.schedule = std::move(info);
  }
  const auto wants = [&](std::string_view name) {
    return std::find(config.controllers.begin(), config.controllers.end(), name) !=
           config.controllers.end();
  };
  const bool want_pid = wants("pid");
  if (config.references || want_pid || wants("static-safe")) {
    progress("static-safe search", 0, 1);
    out.static_safe = SearchStaticSafe(s, config.budget_w, config.violation_target,
                                       config.calibration_seeds, search_steps, config.threads);
  }
  if (want_pid) {
    progress("pid gain search", 0, 1);
    // Like for like: with a policy, PID is tuned to the constraint the policy was trained for.
    out.pid_target = config.policy ? config.policy->violation_target : config.violation_target;
    out.pid_window_s = config.policy ? config.policy->cost_window_s : kScoreWindowsS[0];
    out.pid = SearchPid(s, config.budget_w, out.pid_target, config.calibration_seeds, search_steps,
                        out.static_safe.group_size, config.threads, out.pid_window_s, schedule);
  }
  if (out.schedule && (config.references || wants("static-safe-lowest"))) {
    progress("static-safe search at the lowest budget", 0, 1);
    out.static_safe_lowest =
        SearchStaticSafe(s, out.schedule->lowest_w, config.violation_target,
                         config.calibration_seeds, search_steps, config.threads);
  }
  if (out.schedule) {
    if (wants("static-oracle")) {
      // Every level of every seed's schedule, or quantiles of them (the lowest and the highest
      // among them).
      std::vector<double> levels;
      for (const auto& b : out.schedule->per_seed) {
        for (const auto& p : b.points()) levels.push_back(p.budget_w);
      }
      std::sort(levels.begin(), levels.end());
      levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
      if (levels.size() > kMaxOracleLevels) {
        std::vector<double> picked;
        for (size_t i = 0; i < kMaxOracleLevels; ++i) {
          picked.push_back(levels[i * (levels.size() - 1) / (kMaxOracleLevels - 1)]);
        }
        levels = std::move(picked);
      }
      for (size_t i = 0; i < levels.size(); ++i) {
        progress("static-oracle search", static_cast<int>(i), static_cast<int>(levels.size()));
        out.oracle.push_back(
            {levels[i], SearchStaticSafe(s, levels[i], config.violation_target,
                                         config.calibration_seeds, search_steps, config.threads)});
      }
    }
  }

  // Every controller asked for, plus the two every comparison is made against.
  std::vector<std::string> names = config.controllers;
  std::vector<std::string> bases;
  if (config.references) {
    bases = {"uncontrolled", "static-safe"};
    if (out.schedule) bases.push_back("static-safe-lowest");
  }
  for (const std::string& base : bases) {
    if (std::find(names.begin(), names.end(), base) == names.end()) names.push_back(base);
  }
  const control::ActuatorLimits limits = LimitsOf(s);
  // Every controller through the one factory (control/factory.h); static-oracle is this
  // evaluation's own reference.
  auto make = [&](const std::string& name)
      -> std::pair<control::BuiltController, std::unique_ptr<control::Controller>> {
    if (name == "static-oracle")
      return {control::BuiltController(), std::make_unique<StaticOracle>(out.oracle)};
    control::ControllerSpec spec;
    spec.limits = limits;
    spec.interval_s = s.interval_s;
    spec.concurrency = s.concurrency;
    spec.group_size = s.group_size;
    spec.kind = name;
    if (name == "static-safe" || name == "static-safe-lowest") {
      const StaticSafe& x = name == "static-safe" ? out.static_safe : *out.static_safe_lowest;
      spec.kind = "static";
      spec.label = name;
      spec.concurrency = x.concurrency;
      spec.group_size = x.group_size;
    } else if (name == "pid") {
      spec.pid = out.pid.gains;
      spec.group_size = out.pid.group_size;
    } else if (name == "ppo") {
      spec.policy = config.policy;
    }
    auto built = control::MakeController(spec);
    assert(built.ok());  // the names were checked above
    return {std::move(*built), nullptr};
  };
  const int n = static_cast<int>(names.size());
  std::vector<std::vector<EpisodeResult>> runs(
      static_cast<size_t>(n), std::vector<EpisodeResult>(static_cast<size_t>(config.seeds)));
  std::atomic<int> done{0};
  ParallelFor(n * config.seeds, config.threads, [&](int k) {
    const int ci = k / config.seeds;
    const int seed = k % config.seeds;
    auto [built, own] = make(names[static_cast<size_t>(ci)]);
    control::Controller& c = own ? *own : built.get();
    EpisodeOptions o;
    o.horizon_s = out.horizon_s[static_cast<size_t>(seed)];
    if (config.horizon == Horizon::kSteps) {
      // Exactly `steps` steps; the time cap only stops a controller that stalls the trainer.
      o.steps = config.steps;
      o.horizon_s = kStepsHorizonCap * out.horizon_s[static_cast<size_t>(seed)];
    }
    o.record_power = config.record_power && seed == 0;
    if (out.schedule) o.budget = &out.schedule->per_seed[static_cast<size_t>(seed)];
    runs[static_cast<size_t>(ci)][static_cast<size_t>(seed)] =
        RunEpisode(s, config.budget_w, config.first_seed + static_cast<uint64_t>(seed), c, o);
    progress("episodes", ++done, n * config.seeds);
  });

  for (int ci = 0; ci < n; ++ci) {
    ControllerEval e;
    e.name = names[static_cast<size_t>(ci)];
    e.runs = std::move(runs[static_cast<size_t>(ci)]);
    std::array<std::vector<double>, 3> v;
    std::vector<double> tok, en, tpm, mc, mg, lf, ld;
    for (const EpisodeResult& r : e.runs) {
      lf.push_back(r.limit_fraction);
      ld.push_back(r.limit_depth);
      for (size_t w = 0; w < 3; ++w) v[w].push_back(r.violation_fraction[w]);
      tok.push_back(r.tokens);
      en.push_back(r.energy_j);
      tpm.push_back(r.tokens_per_mwh());
      mc.push_back(r.mean_concurrency);
      mg.push_back(r.mean_group_size);
    }
    for (size_t w = 0; w < 3; ++w) e.violation_fraction[w] = StatOf(v[w]);
    e.tokens = StatOf(tok);
    e.energy_j = StatOf(en);
    e.tokens_per_mwh = StatOf(tpm);
    e.mean_concurrency = StatOf(mc);
    e.mean_group_size = StatOf(mg);
    e.limit_fraction = StatOf(lf);
    e.limit_depth = StatOf(ld);
    if (out.schedule) {
      std::vector<double> settled;
      size_t unsettled = 0;
      for (const EpisodeResult& r : e.runs) {
        settled.insert(settled.end(), r.settled_s.begin(), r.settled_s.end());
        unsettled += r.unsettled;
      }
      e.settle = analysis::SummarizeSettle(std::move(settled), unsettled);
    }
    const auto setting_text = [](const StaticSafe& x) {
      return fmt::format("concurrency {}, group size {}{}", x.concurrency, x.group_size,
                         x.meets_target ? "" : " (no setting meets the target)");
    };
    if (e.name == "static-safe-lowest") {
      e.setting = setting_text(*out.static_safe_lowest) +
                  fmt::format(", searched at {:.1f} W per GPU", out.schedule->lowest_w);
    } else if (e.name == "static-oracle") {
      std::vector<std::string> parts;
      for (const OracleLevel& l : out.oracle) {
        parts.push_back(fmt::format("{:.1f} W: {}x{}", l.budget_w, l.setting.concurrency,
                                    l.setting.group_size));
      }
      e.setting = fmt::format("searched per budget level ({})", fmt::join(parts, ", "));
    } else if (e.name == "uncontrolled") {
      e.setting = fmt::format("concurrency {}, group size {}", s.concurrency, s.group_size);
    } else if (e.name == "static-safe") {
      e.setting = fmt::format("concurrency {}, group size {}{}", out.static_safe.concurrency,
                              out.static_safe.group_size,
                              out.static_safe.meets_target ? "" : " (no setting meets the target)");
    } else if (e.name == "power-cap") {
      e.setting = out.schedule ? std::string("power limit at the budget in force")
                               : fmt::format("power limit {:.1f} W per GPU", config.budget_w);
    } else if (e.name == "pid") {
      e.setting = fmt::format(
          "kp {}, ki {}/s, margin {}, group size {}; tuned to {:g} s "
          "violations <= {:g}%{}",
          out.pid.gains.kp, out.pid.gains.ki, out.pid.gains.margin, out.pid.group_size,
          out.pid_window_s, 100.0 * out.pid_target, out.pid.meets_target ? "" : " (not met)");
    } else {
      e.setting = fmt::format(
          "policy trained on {}{}",
          config.policy->trained_on.empty()
              ? "?"
              : fmt::format("{}", fmt::join(config.policy->trained_on, "+")),
          config.policy->group_size_only ? ", group size only, no shield" : ", in the shield");
    }
    out.controllers.push_back(std::move(e));
  }
  const ControllerEval* unc = nullptr;
  const ControllerEval* safe = nullptr;
  const ControllerEval* lowest = nullptr;
  const ControllerEval* oracle = nullptr;
  for (const auto& e : out.controllers) {
    if (e.name == "uncontrolled") unc = &e;
    if (e.name == "static-safe") safe = &e;
    if (e.name == "static-safe-lowest") lowest = &e;
    if (e.name == "static-oracle") oracle = &e;
  }
  auto pct = [](double a, double b) -> std::optional<double> {
    if (b == 0.0) return std::nullopt;
    return 100.0 * (a / b - 1.0);
  };
  for (auto& e : out.controllers) {
    if (unc != nullptr) {
      e.tokens_vs_uncontrolled_pct = pct(e.tokens.mean, unc->tokens.mean);
      e.violations_vs_uncontrolled_pct =
          pct(e.violation_fraction[0].mean, unc->violation_fraction[0].mean);
      e.tokens_per_mwh_vs_uncontrolled_pct = pct(e.tokens_per_mwh.mean, unc->tokens_per_mwh.mean);
    }
    if (safe != nullptr) e.tokens_vs_static_safe_pct = pct(e.tokens.mean, safe->tokens.mean);
    if (lowest != nullptr)
      e.tokens_vs_static_safe_lowest_pct = pct(e.tokens.mean, lowest->tokens.mean);
    if (oracle != nullptr) e.tokens_vs_static_oracle_pct = pct(e.tokens.mean, oracle->tokens.mean);
  }
  // Only the controllers asked for, in their order.
  std::vector<ControllerEval> asked;
  for (const std::string& name : config.controllers) {
    for (auto& e : out.controllers) {
      if (e.name == name) asked.push_back(e);
    }
  }
  out.controllers = std::move(asked);
  return out;
}

}  // namespace headroom::sim
