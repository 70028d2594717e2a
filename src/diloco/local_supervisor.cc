#include "diloco/local_supervisor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "diloco/round_group.h"

namespace headroom::diloco {
namespace {

Result<pid_t> Spawn(const std::vector<std::string>& argv, const std::string& out_dir,
                    const std::string& name) {
  const std::string log = out_dir + "/" + name + ".log";
  const std::string stdout_path = out_dir + "/" + name + ".stdout";
  const pid_t pid = fork();
  if (pid < 0) return Error::Io(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    const int o = open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o >= 0) dup2(o, 1);
    if (e >= 0) dup2(e, 2);
    std::vector<std::string> copy = argv;
    std::vector<char*> cargv;
    for (auto& s : copy) cargv.push_back(s.data());
    cargv.push_back(nullptr);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  return pid;
}

std::string LastLine(const std::string& path) {
  std::ifstream f(path);
  std::string last, line;
  while (std::getline(f, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}

}  // namespace

Result<Churn> ParseChurn(const std::string& text) {
  Churn c;
  if (text.empty()) return c;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    const auto colon = part.find(':');
    const std::string what = part.substr(0, colon);
    int round = -1;
    try {
      if (colon == std::string::npos) throw std::invalid_argument("no round");
      std::size_t used = 0;
      round = std::stoi(part.substr(colon + 1), &used);
      if (used != part.size() - colon - 1 || round < 1) throw std::invalid_argument("bad");
    } catch (const std::exception&) {
      return Error::Usage("--churn: '" + part +
                          "': expected kill-at-round:R or join-at-round:R, R >= 1");
    }
    if (what == "kill-at-round") {
      c.kill_at_round = round;
    } else if (what == "join-at-round") {
      c.join_at_round = round;
    } else {
      return Error::Usage("--churn: '" + what + "' is not kill-at-round or join-at-round");
    }
  }
  if (c.join_at_round >= 0 && c.kill_at_round >= 0 && c.join_at_round <= c.kill_at_round) {
    return Error::Usage("--churn: join-at-round must come after kill-at-round");
  }
  return c;
}

int LastAgreedRound(coord::Store& store, const std::string& run) {
  auto r = store.Get(RunPrefix(run) + "rounds/", true);
  if (!r) return -1;
  int last = -1;
  for (const auto& kv : r->kvs) {
    if (!kv.key.ends_with("/agreed")) continue;
    const auto slash = kv.key.rfind('/', kv.key.size() - 8);
    last = std::max(last, std::atoi(kv.key.substr(slash + 1, 8).c_str()));
  }
  return last;
}

namespace {

// Churn's kill: SIGKILL a live worker at a random point of the round's expected time (the mean
// time between the rounds agreed so far; 1 s before two).
void KillDuringRound(const LocalRunPlan& plan, const std::function<double()>& now_s,
                     const std::function<void(const std::string&)>& progress, std::mt19937_64& rng,
                     LocalRunResult* out) {
  const auto& agreed = out->agreed_at_s;
  const double round_s = agreed.size() >= 2 ? (agreed.rbegin()->second - agreed.begin()->second) /
                                                  static_cast<double>(agreed.size() - 1)
                                            : 1.0;
  std::uniform_real_distribution<double> frac(0.2, 0.8);
  std::this_thread::sleep_for(
      std::chrono::microseconds(static_cast<long>(frac(rng) * round_s * 1e6)));
  std::vector<std::size_t> alive;
  for (std::size_t i = 0; i < out->children.size(); ++i) {
    if (!out->children[i].done) alive.push_back(i);
  }
  if (!alive.empty()) {
    LocalChild& victim = out->children[alive[rng() % alive.size()]];
    kill(victim.pid, SIGKILL);
    victim.killed = true;
    out->killed_at_s = now_s();
    out->killed_round = LastAgreedRound(*plan.store, plan.run) + 1;
    out->killed_name = victim.name;
    progress(fmt::format("SIGKILL {} during round {} ({:.1f} s)", victim.name, out->killed_round,
                         out->killed_at_s));
  }
}

}  // namespace

Result<LocalRunResult> SuperviseLocal(const LocalRunPlan& plan,
                                      const std::function<void(const std::string&)>& progress) {
  LocalRunResult out;
  std::vector<LocalChild>& children = out.children;
  const auto kill_all = [&children] {
    for (auto& c : children) {
      if (!c.done && c.pid > 0) {
        kill(c.pid, SIGKILL);
        waitpid(c.pid, nullptr, 0);
        c.done = true;
      }
    }
  };
  for (int i = 0; i < plan.workers; ++i) {
    const std::string name = fmt::format("worker-{}", i);
    auto pid = Spawn(plan.argv_of(name, plan.workers, i == 0), plan.out_dir, name);
    if (!pid) {
      kill_all();
      return std::move(pid).error();
    }
    children.push_back({name, *pid});
  }
  coord::Store& store = *plan.store;
  const Churn& churn = plan.churn;
  std::mt19937_64 rng(plan.seed * 7919 + 17);
  const auto t0 = std::chrono::steady_clock::now();
  const std::function<double()> now_s = [&t0] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  int shown = -2;
  double last_progress = now_s();
  for (;;) {
    bool all_done = true;
    for (auto& c : children) {
      if (c.done) continue;
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.done = true;
        c.status = status;
      } else {
        all_done = false;
      }
    }
    if (all_done) break;
    const int last = LastAgreedRound(store, plan.run);
    if (last > shown && last >= 0) {
      for (int r = std::max(shown + 1, 0); r <= last; ++r) out.agreed_at_s[r] = now_s();
      shown = last;
      last_progress = now_s();
      progress(fmt::format("round {}/{} done ({:.1f} s)", last + 1, plan.rounds, now_s()));
    }
    // Churn: SIGKILL a worker during round R (at a random point of its expected time), and a
    // fresh one during round R2.
    if (churn.kill_at_round >= 0 && out.killed_at_s < 0 && last >= churn.kill_at_round - 1) {
      KillDuringRound(plan, now_s, progress, rng, &out);
    }
    if (churn.join_at_round >= 0 && out.joined_round < 0 && last >= churn.join_at_round - 1) {
      const std::string name = fmt::format("worker-{}", children.size());
      auto pid = Spawn(plan.argv_of(name, 1, false), plan.out_dir, name);
      if (!pid) {
        kill_all();
        return std::move(pid).error();
      }
      children.push_back({name, *pid});
      out.joined_round = last + 1;
      progress(fmt::format("{} joins during round {} ({:.1f} s)", name, out.joined_round, now_s()));
    }
    if (now_s() - last_progress > plan.stall_limit_s) {
      kill_all();
      return Error::Io(fmt::format("no round completed in {:.0f} s (logs in {})",
                                   plan.stall_limit_s, plan.out_dir));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  out.wall_s = now_s();
  // Every worker not killed on purpose must have ended well.
  for (const auto& c : children) {
    if (c.killed) continue;
    if (!WIFEXITED(c.status) || WEXITSTATUS(c.status) != 0) {
      const std::string log = plan.out_dir + "/" + c.name + ".log";
      return Error::Io(fmt::format("{} failed ({}): {}", c.name, log, LastLine(log)));
    }
  }
  return out;
}

}  // namespace headroom::diloco
