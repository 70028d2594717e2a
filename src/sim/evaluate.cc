#include "sim/evaluate.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <set>
#include <thread>

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

namespace {

constexpr uint64_t kCalibrationSeed0 = 1001;

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
              size_t window, Make make) {
  Score sc;
  for (size_t i = 0; i < horizons.size(); ++i) {
    auto c = make();
    EpisodeOptions o;
    o.horizon_s = horizons[i];
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
                    int steps, int group_size, int threads, double window_s) {
  size_t window = 0;
  for (size_t i = 0; i < kScoreWindowsS.size(); ++i) {
    if (std::abs(kScoreWindowsS[i] - window_s) < 1e-9) window = i;
  }
  const std::vector<double> horizons =
      Horizons(s, budget_w, kCalibrationSeed0, calibration_seeds, steps, threads);
  const control::Range range{s.concurrency_range.lo, s.concurrency_range.hi};
  std::vector<control::PidGains> grid;
  for (double kp : {0.5, 1.0, 2.0, 4.0, 8.0}) {
    for (double ki : {0.1, 0.3, 1.0, 3.0}) {
      for (double margin : {0.0, 0.03, 0.06, 0.1, 0.15}) grid.push_back({kp, ki, margin});
    }
  }
  std::vector<Score> scores(grid.size());
  ParallelFor(static_cast<int>(grid.size()), threads, [&](int k) {
    scores[static_cast<size_t>(k)] = ScoreOn(s, budget_w, horizons, window, [&] {
      return std::make_unique<control::Pid>(grid[static_cast<size_t>(k)], range, s.concurrency,
                                            group_size);
    });
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
  }
  EvalResult out;
  out.scenario = s.name;
  out.budget_w = config.budget_w;
  out.seeds = config.seeds;
  out.steps = config.steps;
  out.violation_target = config.violation_target;
  auto progress = [&](const std::string& what, int done, int total) {
    if (config.progress) config.progress(what, done, total);
  };

  progress("horizons", 0, 1);
  out.horizon_s = Horizons(s, config.budget_w, 1, config.seeds, config.steps, config.threads);
  const int search_steps = std::min(config.steps, config.search_steps);
  progress("static-safe search", 0, 1);
  out.static_safe = SearchStaticSafe(s, config.budget_w, config.violation_target,
                                     config.calibration_seeds, search_steps, config.threads);
  const bool want_pid = std::find(config.controllers.begin(), config.controllers.end(), "pid") !=
                        config.controllers.end();
  if (want_pid) {
    progress("pid gain search", 0, 1);
    // Like for like: with a policy, PID is tuned to the constraint the policy was trained for.
    out.pid_target = config.policy ? config.policy->violation_target : config.violation_target;
    out.pid_window_s = config.policy ? config.policy->cost_window_s : kScoreWindowsS[0];
    out.pid = SearchPid(s, config.budget_w, out.pid_target, config.calibration_seeds, search_steps,
                        out.static_safe.group_size, config.threads, out.pid_window_s);
  }

  // Every controller asked for, plus the two every comparison is made against.
  std::vector<std::string> names = config.controllers;
  for (std::string base : {"uncontrolled", "static-safe"}) {
    if (std::find(names.begin(), names.end(), base) == names.end()) names.push_back(base);
  }
  const control::ActuatorLimits limits = LimitsOf(s);
  const control::Range crange = limits.concurrency;
  auto make =
      [&](const std::string& name,
          std::unique_ptr<control::Controller>* inner) -> std::unique_ptr<control::Controller> {
    if (name == "uncontrolled")
      return std::make_unique<control::Uncontrolled>(s.concurrency, s.group_size);
    if (name == "static-safe") {
      return std::make_unique<control::Static>("static-safe", out.static_safe.concurrency,
                                               out.static_safe.group_size);
    }
    if (name == "power-cap")
      return std::make_unique<control::PowerCap>(s.concurrency, s.group_size);
    if (name == "pid") {
      return std::make_unique<control::Pid>(out.pid.gains, crange, s.concurrency,
                                            out.pid.group_size);
    }
    if (config.policy->group_size_only) {
      return std::make_unique<control::PolicyController>(*config.policy, limits);
    }
    *inner = std::make_unique<control::PolicyController>(*config.policy, limits);
    return std::make_unique<control::Shield>(
        **inner, control::ShieldFor(config.policy->cost_window_s, s.interval_s, config.shield),
        crange);
  };
  const int n = static_cast<int>(names.size());
  std::vector<std::vector<EpisodeResult>> runs(
      static_cast<size_t>(n), std::vector<EpisodeResult>(static_cast<size_t>(config.seeds)));
  std::atomic<int> done{0};
  ParallelFor(n * config.seeds, config.threads, [&](int k) {
    const int ci = k / config.seeds;
    const int seed = k % config.seeds;
    std::unique_ptr<control::Controller> inner;
    auto c = make(names[static_cast<size_t>(ci)], &inner);
    EpisodeOptions o;
    o.horizon_s = out.horizon_s[static_cast<size_t>(seed)];
    o.record_power = config.record_power && seed == 0;
    runs[static_cast<size_t>(ci)][static_cast<size_t>(seed)] =
        RunEpisode(s, config.budget_w, static_cast<uint64_t>(seed) + 1, *c, o);
    progress("episodes", ++done, n * config.seeds);
  });

  for (int ci = 0; ci < n; ++ci) {
    ControllerEval e;
    e.name = names[static_cast<size_t>(ci)];
    e.runs = std::move(runs[static_cast<size_t>(ci)]);
    std::array<std::vector<double>, 3> v;
    std::vector<double> tok, en, tpm, mc, mg;
    for (const EpisodeResult& r : e.runs) {
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
    if (e.name == "uncontrolled") {
      e.setting = fmt::format("concurrency {}, group size {}", s.concurrency, s.group_size);
    } else if (e.name == "static-safe") {
      e.setting = fmt::format("concurrency {}, group size {}{}", out.static_safe.concurrency,
                              out.static_safe.group_size,
                              out.static_safe.meets_target ? "" : " (no setting meets the target)");
    } else if (e.name == "power-cap") {
      e.setting = fmt::format("power limit {:.1f} W per GPU", config.budget_w);
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
  for (const auto& e : out.controllers) {
    if (e.name == "uncontrolled") unc = &e;
    if (e.name == "static-safe") safe = &e;
  }
  auto pct = [](double a, double b) -> std::optional<double> {
    if (b == 0.0) return std::nullopt;
    return 100.0 * (a / b - 1.0);
  };
  for (auto& e : out.controllers) {
    e.tokens_vs_uncontrolled_pct = pct(e.tokens.mean, unc->tokens.mean);
    e.tokens_vs_static_safe_pct = pct(e.tokens.mean, safe->tokens.mean);
    e.violations_vs_uncontrolled_pct =
        pct(e.violation_fraction[0].mean, unc->violation_fraction[0].mean);
    e.tokens_per_mwh_vs_uncontrolled_pct = pct(e.tokens_per_mwh.mean, unc->tokens_per_mwh.mean);
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
