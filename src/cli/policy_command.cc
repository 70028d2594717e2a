// `headroom policy`: what a policy file says of itself (show), a version-3 file written again
// as version 4, with the envelopes of the scenarios it was trained on (upgrade), and a policy's
// efficiency variant, the same network acting on a fraction of the budget (derate).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <filesystem>

#include "cli/commands.h"
#include "common/atomic_file.h"
#include "common/paths.h"
#include "control/policy.h"
#include "sim/episode.h"
#include "twin/scenario.h"

namespace headroom::cli {
namespace {

struct PolicyArgs {
  std::string in;
  std::string out;
  double fraction = 1.0;
};

// "314.6 W; moving ..." (a policy trained at one budget): that budget; else none.
std::optional<double> FixedBudgetOf(const std::string& trained_budget) {
  double w = 0.0;
  const char* end = trained_budget.data() + trained_budget.size();
  const auto [ptr, ec] = std::from_chars(trained_budget.data(), end, w);
  if (ec != std::errc() || ptr == trained_budget.data() ||
      std::string_view(ptr, end).rfind(" W", 0)) {
    return std::nullopt;
  }
  return w;
}

Status Upgrade(const PolicyArgs& args) {
  if (auto st = RefuseOutputOverInput(args.out, "NEW", {{"OLD", args.in}}); !st) return st;
  auto policy = control::LoadPolicy(args.in, control::PolicyRead::kUpgrade);
  if (!policy) return std::move(policy).error();
  if (policy->trained_on.empty()) {
    return Error::Input(fmt::format(
        "{}: key 'trained_on': empty, so no envelope can be made: retrain it", args.in));
  }
  const std::optional<double> fixed_w = FixedBudgetOf(policy->trained_budget);
  policy->envelopes.clear();
  for (const std::string& name : policy->trained_on) {
    auto scenario = twin::LoadScenario(name);
    if (!scenario) {
      return Error::Input(
          fmt::format("{}: key 'trained_on': {}", args.in, scenario.error().message()));
    }
    policy->envelopes.push_back(sim::EnvelopeOf(
        *scenario, fixed_w ? std::pair{*fixed_w, *fixed_w} : scenario->budget_range_w));
  }
  auto out = AtomicFileWriter::Open(args.out);
  if (!out) return std::move(out).error();
  out->Write(control::PolicyToJson(*policy));
  if (auto st = out->Commit(); !st) return st;
  fmt::print("upgraded   {} -> {} (version {}, {} envelope{})\n", args.in, args.out,
             control::kPolicyVersion, policy->envelopes.size(),
             policy->envelopes.size() == 1 ? "" : "s");
  return OkStatus();
}

// The policy with control_budget_fraction = args.fraction (control/policy.h), its command
// extended with how it was made.
Status Derate(const PolicyArgs& args) {
  if (auto st = RefuseOutputOverInput(args.out, "OUT", {{"POLICY", args.in}}); !st) return st;
  auto policy = control::LoadPolicy(args.in);
  if (!policy) return std::move(policy).error();
  policy->control_budget_fraction = args.fraction;
  policy->command += fmt::format(" && headroom policy derate --fraction {} {} OUT", args.fraction,
                                 std::filesystem::path(args.in).filename().string());
  auto out = AtomicFileWriter::Open(args.out);
  if (!out) return std::move(out).error();
  out->Write(control::PolicyToJson(*policy));
  if (auto st = out->Commit(); !st) return st;
  fmt::print("derated    {} -> {} (acts on {} of the budget in force)\n", args.in, args.out,
             args.fraction);
  return OkStatus();
}

Status Show(const PolicyArgs& args) {
  auto policy = control::LoadPolicy(args.in);
  if (!policy) return std::move(policy).error();
  const control::Policy& p = *policy;
  fmt::print("policy     {} (version {}, {} steps, seed {})\n", args.in, control::kPolicyVersion,
             p.timesteps, p.seed);
  fmt::print("actuators  {}\n", p.group_size_only    ? "group size"
                                : p.fixed_group_size ? "concurrency, power limit"
                                                     : "concurrency, group size, power limit");
  if (p.control_budget_fraction != 1.0) {
    fmt::print("acts on    {} of the budget in force (an efficiency variant)\n",
               p.control_budget_fraction);
  }
  fmt::print("{:<16} {:>17} {:>10} {:>12} {:>11} {:>11} {:>12} {:>11}\n", "scenario",
             "budgets W/GPU", "default W", "concurrency", "group size", "nameplate W",
             "limit min W", "admission");
  for (const control::PolicyEnvelope& e : p.envelopes) {
    fmt::print("{:<16} {:>17} {:>10.1f} {:>12} {:>11} {:>11.0f} {:>12.0f} {:>11}\n", e.scenario,
               fmt::format("{:.1f}-{:.1f}", e.budget_range_w.first, e.budget_range_w.second),
               e.budget_w, fmt::format("{}-{}", e.limits.concurrency.lo, e.limits.concurrency.hi),
               fmt::format("{}-{}", e.limits.group_size.lo, e.limits.group_size.hi),
               e.limits.nameplate_w, e.limits.power_limit_min_w,
               control::AdmissionName(e.admission));
  }
  return OkStatus();
}

}  // namespace

Command SetupPolicy(CLI::App& app) {
  auto a = std::make_shared<PolicyArgs>();
  app.require_subcommand(1);
  auto* show = app.add_subcommand("show", "Where a policy was trained: its envelopes");
  show->add_option("POLICY", a->in, "Policy JSON")->required();
  auto* upgrade = app.add_subcommand(
      "upgrade", "Write a version-3 policy again as version 4, with its trained envelopes");
  upgrade->add_option("OLD", a->in, "Version-3 policy JSON")->required();
  upgrade->add_option("NEW", a->out, "Where to write version 4")->required();
  auto* derate = app.add_subcommand(
      "derate",
      "The same policy acting on a fraction of the budget in force (an efficiency variant: "
      "lower clocks where they cost fewer tokens than they save joules)");
  derate->add_option("POLICY", a->in, "Policy JSON")->required();
  derate->add_option("OUT", a->out, "Where to write the variant")->required();
  derate->add_option("--fraction", a->fraction, "Of the budget in force, 0.5 to 1")
      ->required()
      ->check(CLI::Range(0.5, 1.0));
  return [a, show, derate]() -> Status {
    if (show->parsed()) return Show(*a);
    return derate->parsed() ? Derate(*a) : Upgrade(*a);
  };
}

}  // namespace headroom::cli
