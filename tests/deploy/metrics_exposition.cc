// Prints the real Prometheus exposition of the agent (`agent`) or of a leading coordinator
// replica (`coordinator`), from the functions their /metrics routes serve, with every optional
// family present: what tests/deploy/check_monitoring.py checks the alert rules and the Grafana
// dashboard against (every metric they name must be one of these).
#include <cstdio>
#include <cstring>
#include <string>

#include "agent/agent.h"
#include "agent/api.h"
#include "coord/coordinator.h"
#include "coord_server/coordinator_server.h"

namespace {

std::string AgentExposition() {
  headroom::agent::AgentStatus s;
  s.t_s = 100.0;
  s.budget_w = 300.0;
  s.gpus = 2;
  s.power_w = {290.0, 310.0};
  s.job_power_w = 300.0;
  s.actuation.concurrency = 8;
  s.actuation.group_size = 16;
  s.decisions = 200;
  s.report = headroom::agent::TrainerReport{};
  s.report_age_s = 1.5;
  s.reports = 10;
  s.violation_fraction = {0.1, 0.0, std::nullopt};
  s.windows = {199, 3, 0};
  s.windows_over = {20, 0, 0};
  s.latency_samples = 200;
  s.latency_sum_s = 0.2;
  s.power_limit_w = {300.0, std::nullopt};
  headroom::agent::SiteHealth site;
  site.fences = 1;
  site.leases_lost = 1;
  return headroom::agent::MetricsText(s, site);
}

std::string CoordinatorExposition() {
  headroom::coord::CoordinatorStatus s;
  s.role = "leader";
  s.term = 7;
  headroom::coord::Ledger l;
  l.site_budget_w = 1000.0;
  l.target_site_budget_w = 1000.0;
  l.reserve_w = 100.0;
  l.jobs["a"].grant_w = 450.0;
  l.jobs["a"].held_w = 450.0;
  l.jobs["a"].floor_w = 100.0;
  s.ledger = l;
  s.members["a"].job = "a";
  s.members["a"].power_w = 400.0;
  s.members["a"].budget_w = 450.0;
  s.txn_latency_s = {0.01, 0.02};
  s.decrease_settle_s = {2.0};
  return headroom::coord_server::CoordinatorMetricsText(s);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "agent") == 0) {
    std::fputs(AgentExposition().c_str(), stdout);
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "coordinator") == 0) {
    std::fputs(CoordinatorExposition().c_str(), stdout);
    return 0;
  }
  std::fputs("usage: metrics_exposition agent|coordinator\n", stderr);
  return 2;
}
