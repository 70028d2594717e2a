// The budget in force, and where it comes from (docs/AGENT.md, "Budgets"). The runner asks its
// BudgetSource before every decision and hands the answer to the agent, so a change takes effect
// at the next decision. Sources: StaticBudget (the flag), PostedBudget (POST /v1/budget, over the
// flag's value until the first post); the site coordinator will be another.
//
// Budgets name their scope: budget_per_gpu_w (what the agent controls against: the job's mean
// power per GPU) and job_budget_w (the job's whole power: budget_per_gpu_w x GPUs).
#pragma once

#include <cstdint>
#include <mutex>

#include <optional>
#include <string>
#include "common/thread_annotations.h"

namespace headroom::agent {

// Per GPU, the bound of every budget the agent takes (as the CLI's --budget-w).
inline constexpr double kMinBudgetPerGpuW = 1.0;
inline constexpr double kMaxBudgetPerGpuW = 10000.0;

struct BudgetInForce {
  double budget_per_gpu_w = 0.0;
  std::string from;      // "--budget-w", "POST /v1/budget", ...
  uint64_t version = 0;  // increases with every change
  // A site's hold before the next step (SiteBudget), 0: none; hold_id names it.
  double hold_s = 0.0;
  int64_t hold_id = 0;
  // In a site (SiteBudget): trainers fail closed (docs/SITE.md, "Every job at the site").
  bool site = false;
  // Not admitted: the trainer starts no step until this is false.
  bool standby = false;
  // Fenced (SiteBudget: the lease not renewed in time): with --guard-power-limit the GPUs go to
  // their lowest power limit at once (AgentConfig::fenced_power_limit_w).
  bool fenced = false;
};

class BudgetSource {
 public:
  virtual ~BudgetSource() = default;
  // The budget for the decision at agent time t_s. Thread-safe.
  virtual BudgetInForce Current(double t_s) = 0;
};

class StaticBudget final : public BudgetSource {
 public:
  StaticBudget(double budget_per_gpu_w, std::string from)
      : budget_{budget_per_gpu_w, std::move(from), 0} {}
  BudgetInForce Current(double) override { return budget_; }

 private:
  const BudgetInForce budget_;
};

// The flag's value until a client posts one. Thread-safe: the server sets, the runner reads.
class PostedBudget final : public BudgetSource {
 public:
  PostedBudget(double budget_per_gpu_w, std::string from)
      : budget_{budget_per_gpu_w, std::move(from), 0} {}
  BudgetInForce Current(double) override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return budget_;
  }
  // REQUIRES: kMinBudgetPerGpuW <= budget_per_gpu_w <= kMaxBudgetPerGpuW.
  void Set(double budget_per_gpu_w, std::string from) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    budget_.budget_per_gpu_w = budget_per_gpu_w;
    budget_.from = std::move(from);
    ++budget_.version;
  }

 private:
  Mutex mu_;
  BudgetInForce budget_ GUARDED_BY(mu_);
};

}  // namespace headroom::agent
