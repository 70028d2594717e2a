#include "cli/agent_twin.h"

#include <fmt/format.h>

#include <algorithm>

#include "sim/episode.h"
#include "twin/scenario.h"
#include "twin_link/twin_link.h"

namespace headroom::cli {
namespace {

Result<twin::Scenario> LoadSteerable(const std::string& name_or_path) {
  auto loaded = twin::LoadScenario(name_or_path);
  if (!loaded) return std::move(loaded).error();
  if (!loaded->has_rollout) {
    return Error::Usage(fmt::format("--scenario '{}' has no rollout to steer", loaded->name));
  }
  return loaded;
}

}  // namespace

Result<AgentScenario> LoadAgentScenario(const std::string& name_or_path) {
  auto s = LoadSteerable(name_or_path);
  if (!s) return std::move(s).error();
  AgentScenario out;
  out.envelope = sim::EnvelopeOf(*s, s->budget_range_w);
  out.envelope.budget_w = s->budget_w;  // the scenario's own default, as it says
  out.gpu_model = s->gpu_model;
  out.floor_w = sim::FloorPerGpuW(*s);
  out.idle_loaded_w = s->idle_loaded_w;
  out.update_w = sim::UpdatePerGpuW(*s);
  return out;
}

Result<AgentTwin> MakeAgentTwin(const std::string& scenario, uint64_t seed, bool follows_trainer,
                                bool in_site) {
  auto s = LoadSteerable(scenario);
  if (!s) return std::move(s).error();
  // In a site the twin's trainer asks before its first step, as the client's trainer does
  // (take_hold at the first step boundary): its model loads for a second first, so the site's
  // answer -- held until admitted -- comes before any step begins.
  if (in_site) s->startup_s = std::max(s->startup_s, 1.0);
  auto twin = std::make_unique<sim::TwinLink>(*s, seed, follows_trainer);
  sim::TwinLink* t = twin.get();
  AgentTwin out;
  out.link = t;
  out.set_limit = [t](double w) { t->SetPowerLimit(w); };
  out.energy_j = [t] { return t->twin().energy_j(); };
  out.source = std::move(twin);
  return out;
}

}  // namespace headroom::cli
