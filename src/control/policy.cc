#include "control/policy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "common/json_fields.h"
#include "common/read_file.h"

namespace headroom::control {

namespace {

using nlohmann::json;

json MlpToJson(const rl::Mlp& mlp) {
  const Eigen::VectorXd p = mlp.Parameters();
  return json{{"sizes", mlp.sizes()},
              {"parameters", std::vector<double>(p.data(), p.data() + p.size())}};
}

std::vector<double> ToStd(const Eigen::VectorXd& v) { return {v.data(), v.data() + v.size()}; }

json EnvelopeToJson(const PolicyEnvelope& e) {
  const ActuatorLimits& l = e.limits;
  json j{{"scenario", e.scenario},
         {"budget_w", e.budget_w},
         {"budget_range_w", {e.budget_range_w.first, e.budget_range_w.second}},
         {"concurrency_range", {l.concurrency.lo, l.concurrency.hi}},
         {"group_size_range", {l.group_size.lo, l.group_size.hi}},
         {"max_rise_factor", l.max_rise_factor},
         {"nameplate_w", l.nameplate_w},
         {"power_limit_min_w", l.power_limit_min_w},
         {"power_limit_rise_w", l.power_limit_rise_w},
         {"concurrency", e.concurrency},
         {"group_size", e.group_size}};
  // Written where it is not the default, so that a continuous policy's file is the same bytes
  // as before the key existed (absent: continuous).
  if (e.admission != Admission::kContinuous) j["admission"] = AdmissionName(e.admission);
  return j;
}

Error Bad(std::string_view source, std::string_view key, std::string_view reason) {
  return Error::Input(fmt::format("{}: key '{}': {}", source, key, reason));
}

}  // namespace

std::string_view AdmissionName(Admission admission) {
  switch (admission) {
    case Admission::kContinuous:
      return "continuous";
    case Admission::kChunked:
      return "chunked";
  }
  return "continuous";
}

std::optional<Admission> ParseAdmission(std::string_view name) {
  for (const Admission a : {Admission::kContinuous, Admission::kChunked}) {
    if (name == AdmissionName(a)) return a;
  }
  return std::nullopt;
}

std::string PolicyToJson(const Policy& policy) {
  json names = json::array();
  for (std::string_view n : kFeatureNames) names.push_back(n);
  json envelopes = json::array();
  for (const PolicyEnvelope& e : policy.envelopes) envelopes.push_back(EnvelopeToJson(e));
  json j{
      {"format", kPolicyFormat},
      {"version", kPolicyVersion},
      {"family", kPolicyFamily},
      {"features", names},
      {"phases", kPhaseNames},
      {"heads", policy.net.heads()},
      {"normalizer",
       {{"mean", ToStd(policy.normalizer.mean())},
        {"var", ToStd(policy.normalizer.var())},
        {"count", policy.normalizer.count()}}},
      {"actor", MlpToJson(policy.net.actor())},
      {"critic", MlpToJson(policy.net.critic())},
      {"trained_on", policy.trained_on},
      {"trained_budget", policy.trained_budget},
      {"envelopes", envelopes},
      {"violation_target", policy.violation_target},
      {"cost_window_s", policy.cost_window_s},
      {"actuators", policy.group_size_only    ? json::array({"group_size"})
                    : policy.fixed_group_size ? json::array({"concurrency"})
                                              : json::array({"concurrency", "group_size"})},
      {"timesteps", policy.timesteps},
      {"seed", policy.seed},
      {"command", policy.command},
      {"shield",
       {{"margin", policy.shield.margin},
        {"sustain", policy.shield.sustain},
        {"cut", policy.shield.cut},
        {"hold_s", policy.shield.hold_s},
        {"decrease_cap_s", policy.shield.decrease_cap_s},
        {"bound_admission", policy.shield.bound_admission},
        {"settle_s", policy.shield.settle_s}}},
  };
  if (policy.control_budget_fraction != 1.0) {
    j["control_budget_fraction"] = policy.control_budget_fraction;
  }
  return j.dump(1) + "\n";
}

namespace {

// Typed reads of the policy's keys, one at a time (common/json_fields.h). A missing key or a
// value of the wrong type is one line naming the file and the key: "p.json: key
// 'actor.parameters': expected an array of numbers".
class Keys {
 public:
  explicit Keys(std::string_view source) : source_(source) {}

  // The member `key` of `object` (whose own path is `path`, "" at the top).
  Result<const json*> Member(const json& object, std::string_view path, std::string_view key,
                             bool required = true) const {
    if (!required && object.is_object() && !object.contains(key)) {
      return static_cast<const json*>(nullptr);
    }
    JsonFields fields = Fields();
    const json* member = JsonObject(fields, object, std::string(path)).Member(key);
    if (!fields.ok()) return Error::Input(fields.message());
    return member;
  }

  template <class T>
  Result<T> Get(const json& object, std::string_view path, std::string_view key) const {
    JsonFields fields = Fields();
    JsonObject o(fields, object, std::string(path));
    T value = Read<T>(o, key);
    if (!fields.ok()) return Error::Input(fields.message());
    return value;
  }

  // An optional member: `fallback` when absent (or null).
  template <class T>
  Result<T> GetOr(const json& object, std::string_view key, T fallback) const {
    JsonFields fields = Fields();
    if (!JsonObject(fields, object).Has(key) && object.is_object()) return fallback;
    return Get<T>(object, "", key);
  }

 private:
  template <class T>
  static T Read(JsonObject& o, std::string_view key) {
    if constexpr (std::is_same_v<T, std::string>) {
      return o.String(key);
    } else if constexpr (std::is_same_v<T, double>) {
      return o.Number(key);
    } else if constexpr (std::is_integral_v<T>) {
      return o.Integer<T>(key);
    } else {  // std::vector<E>
      using E = typename T::value_type;
      if constexpr (std::is_same_v<E, std::string>) {
        return o.Strings(key);
      } else if constexpr (std::is_same_v<E, double>) {
        return o.Numbers(key);
      } else {
        return o.Integers<E>(key);
      }
    }
  }

  JsonFields Fields() const {
    return JsonFields(std::string(source_), JsonFields::Missing::kProblem, "key");
  }

  std::string_view source_;
};

#define HEADROOM_ASSIGN_OR_RETURN(lhs, expr)                 \
  auto lhs##_result = (expr);                                \
  if (!lhs##_result) return std::move(lhs##_result).error(); \
  auto lhs = std::move(lhs##_result).value()

// One envelope at `path` ("envelopes[0]"), every key required and in range.
Result<PolicyEnvelope> EnvelopeFromJson(const json& e, const std::string& path, const Keys& keys,
                                        std::string_view source) {
  const auto at = [&](std::string_view key) { return fmt::format("{}.{}", path, key); };
  HEADROOM_ASSIGN_OR_RETURN(scenario, keys.Get<std::string>(e, path, "scenario"));
  HEADROOM_ASSIGN_OR_RETURN(budget_w, keys.Get<double>(e, path, "budget_w"));
  HEADROOM_ASSIGN_OR_RETURN(budget_range, keys.Get<std::vector<double>>(e, path, "budget_range_w"));
  HEADROOM_ASSIGN_OR_RETURN(concurrency_range,
                            keys.Get<std::vector<int>>(e, path, "concurrency_range"));
  HEADROOM_ASSIGN_OR_RETURN(group_size_range,
                            keys.Get<std::vector<int>>(e, path, "group_size_range"));
  HEADROOM_ASSIGN_OR_RETURN(max_rise_factor, keys.Get<double>(e, path, "max_rise_factor"));
  HEADROOM_ASSIGN_OR_RETURN(nameplate_w, keys.Get<double>(e, path, "nameplate_w"));
  HEADROOM_ASSIGN_OR_RETURN(power_limit_min_w, keys.Get<double>(e, path, "power_limit_min_w"));
  HEADROOM_ASSIGN_OR_RETURN(power_limit_rise_w, keys.Get<double>(e, path, "power_limit_rise_w"));
  HEADROOM_ASSIGN_OR_RETURN(concurrency, keys.Get<int>(e, path, "concurrency"));
  HEADROOM_ASSIGN_OR_RETURN(group_size, keys.Get<int>(e, path, "group_size"));
  // Optional: files written before it was recorded were trained under continuous admission.
  HEADROOM_ASSIGN_OR_RETURN(admission_member, keys.Member(e, path, "admission", false));
  Admission admission = Admission::kContinuous;
  if (admission_member != nullptr && !admission_member->is_null()) {
    const auto parsed = admission_member->is_string()
                            ? ParseAdmission(admission_member->get<std::string>())
                            : std::nullopt;
    if (!parsed) {
      return Bad(source, at("admission"),
                 fmt::format("expected \"{}\" or \"{}\"", AdmissionName(Admission::kContinuous),
                             AdmissionName(Admission::kChunked)));
    }
    admission = *parsed;
  }
  const auto watts = [](double w) { return w >= 0.0 && w <= 10000.0; };
  if (budget_range.size() != 2 || !watts(budget_range[0]) || !watts(budget_range[1]) ||
      budget_range[0] > budget_range[1] || budget_range[0] <= 0.0) {
    return Bad(source, at("budget_range_w"), "expected [LOW, HIGH] watts, 0 < LOW <= HIGH");
  }
  if (!(budget_w > 0.0 && watts(budget_w)))
    return Bad(source, at("budget_w"), "expected watts > 0");
  for (const auto& [key, r] : {std::pair{"concurrency_range", &concurrency_range},
                               std::pair{"group_size_range", &group_size_range}}) {
    if (r->size() != 2 || (*r)[0] < 1 || (*r)[0] > (*r)[1] || (*r)[1] > 1000000) {
      return Bad(source, at(key), "expected [LOW, HIGH], 1 <= LOW <= HIGH");
    }
  }
  if (!(max_rise_factor >= 1.0 && max_rise_factor <= 1000.0)) {
    return Bad(source, at("max_rise_factor"), "expected [1, 1000]");
  }
  for (const auto& [key, w] :
       {std::pair{"nameplate_w", nameplate_w}, std::pair{"power_limit_min_w", power_limit_min_w},
        std::pair{"power_limit_rise_w", power_limit_rise_w}}) {
    if (!watts(w)) return Bad(source, at(key), "expected watts in [0, 10000]");
  }
  PolicyEnvelope out;
  out.scenario = std::move(scenario);
  out.budget_w = budget_w;
  out.budget_range_w = {budget_range[0], budget_range[1]};
  out.limits.concurrency = {concurrency_range[0], concurrency_range[1]};
  out.limits.group_size = {group_size_range[0], group_size_range[1]};
  out.limits.max_rise_factor = max_rise_factor;
  out.limits.nameplate_w = nameplate_w;
  out.limits.power_limit_min_w = power_limit_min_w;
  out.limits.power_limit_rise_w = power_limit_rise_w;
  if (concurrency < out.limits.concurrency.lo || concurrency > out.limits.concurrency.hi) {
    return Bad(source, at("concurrency"), "outside concurrency_range");
  }
  if (group_size < out.limits.group_size.lo || group_size > out.limits.group_size.hi) {
    return Bad(source, at("group_size"), "outside group_size_range");
  }
  out.concurrency = concurrency;
  out.group_size = group_size;
  out.admission = admission;
  return out;
}

// The format, and the version: this headroom's, or (to upgrade) the one before. Whether it
// is the one before.
Result<bool> CheckFormat(const json& j, std::string_view source, PolicyRead read) {
  if (!j.is_object() || !j.contains("format") || j["format"] != kPolicyFormat) {
    return Bad(source, "format",
               fmt::format("not a headroom policy (expected \"{}\")", kPolicyFormat));
  }
  const bool upgradable = read == PolicyRead::kUpgrade && j.contains("version") &&
                          j["version"].is_number_integer() && j["version"] == kPolicyVersion - 1;
  if (!upgradable && j.contains("version") && j["version"].is_number_integer() &&
      j["version"] == kPolicyVersion - 1) {
    return Bad(source, "version",
               fmt::format("{}: it predates the envelopes (the budgets and actuator limits it was "
                           "trained on) that this headroom reads in version {}; run headroom "
                           "policy upgrade {} NEW, or retrain with headroom train",
                           kPolicyVersion - 1, kPolicyVersion, source));
  }
  if (!upgradable && (!j.contains("version") || !j["version"].is_number_integer() ||
                      j["version"] != kPolicyVersion)) {
    return Bad(
        source, "version",
        fmt::format("{}; this headroom reads version {} (retrain with headroom train)",
                    j.contains("version") ? j["version"].dump() : "missing", kPolicyVersion));
  }
  return upgradable;
}

// The vocabulary it was trained under: family, phases, features and heads, this headroom's.
Status CheckVocabulary(const json& j, const Keys& keys, std::string_view source) {
  HEADROOM_ASSIGN_OR_RETURN(family, keys.Get<std::string>(j, "", "family"));
  if (family != kPolicyFamily) {
    return Bad(source, "family",
               fmt::format("'{}'; this headroom runs '{}' policies", family, kPolicyFamily));
  }
  // The phases it was trained on: the one-hot features mean nothing under another vocabulary.
  HEADROOM_ASSIGN_OR_RETURN(phases_member, keys.Member(j, "", "phases", /*required=*/false));
  if (phases_member == nullptr) {
    return Bad(source, "phases",
               "missing: the policy predates the shared phase vocabulary (common/phase.h); "
               "retrain it with headroom train");
  }
  HEADROOM_ASSIGN_OR_RETURN(phases, keys.Get<std::vector<std::string>>(j, "", "phases"));
  if (!std::equal(phases.begin(), phases.end(), kPhaseNames.begin(), kPhaseNames.end())) {
    return Bad(source, "phases",
               fmt::format("trained on [{}]; this headroom's phases are [{}]: retrain it",
                           fmt::join(phases, ", "), fmt::join(kPhaseNames, ", ")));
  }
  HEADROOM_ASSIGN_OR_RETURN(features, keys.Get<std::vector<std::string>>(j, "", "features"));
  bool same = features.size() == kFeatureNames.size();
  for (size_t i = 0; same && i < features.size(); ++i) same = features[i] == kFeatureNames[i];
  if (!same) {
    return Bad(source, "features",
               fmt::format("{} features that differ from the {} this headroom computes",
                           features.size(), kFeatureNames.size()));
  }
  HEADROOM_ASSIGN_OR_RETURN(heads, keys.Get<std::vector<int>>(j, "", "heads"));
  if (heads != std::vector<int>{kConcurrencyMoves, kGroupLevels, kPowerLimitLevels}) {
    return Bad(source, "heads",
               fmt::format("{}; expected [{}, {}, {}]", j.at("heads").dump(), kConcurrencyMoves,
                           kGroupLevels, kPowerLimitLevels));
  }
  return OkStatus();
}

// The actor, the critic and the normalizer, every size checked before a network is allocated.
Status ReadNetwork(const json& j, const Keys& keys, std::string_view source, Policy& p) {
  HEADROOM_ASSIGN_OR_RETURN(actor, keys.Member(j, "", "actor"));
  HEADROOM_ASSIGN_OR_RETURN(critic, keys.Member(j, "", "critic"));
  HEADROOM_ASSIGN_OR_RETURN(actor_sizes, keys.Get<std::vector<int>>(*actor, "actor", "sizes"));
  HEADROOM_ASSIGN_OR_RETURN(critic_sizes, keys.Get<std::vector<int>>(*critic, "critic", "sizes"));
  if (actor_sizes.size() < 2 || actor_sizes.front() != kFeatureCount ||
      actor_sizes.back() != kConcurrencyMoves + kGroupLevels + kPowerLimitLevels) {
    return Bad(source, "actor.sizes",
               fmt::format("{} does not fit {} features and {} logits", (*actor)["sizes"].dump(),
                           kFeatureCount, kConcurrencyMoves + kGroupLevels + kPowerLimitLevels));
  }
  std::vector<int> hidden(actor_sizes.begin() + 1, actor_sizes.end() - 1);
  if (hidden.size() > 8) return Bad(source, "actor.sizes", "at most 8 hidden layers");
  for (int h : hidden) {
    if (h <= 0 || h > 4096) return Bad(source, "actor.sizes", "hidden sizes must be in [1, 4096]");
  }
  std::vector<int> expected_critic{kFeatureCount};
  expected_critic.insert(expected_critic.end(), hidden.begin(), hidden.end());
  expected_critic.push_back(1);
  if (critic_sizes != expected_critic) {
    return Bad(source, "critic.sizes", "does not match the actor's hidden layers");
  }
  // Parameter counts from the sizes, checked before any network is allocated.
  const auto count = [](const std::vector<int>& sizes) {
    size_t n = 0;
    for (size_t l = 0; l + 1 < sizes.size(); ++l) {
      n += static_cast<size_t>(sizes[l + 1]) * static_cast<size_t>(sizes[l] + 1);
    }
    return n;
  };
  // Finite numbers only (As<double> refuses the rest).
  HEADROOM_ASSIGN_OR_RETURN(ap, keys.Get<std::vector<double>>(*actor, "actor", "parameters"));
  HEADROOM_ASSIGN_OR_RETURN(cp, keys.Get<std::vector<double>>(*critic, "critic", "parameters"));
  if (ap.size() != count(actor_sizes)) {
    return Bad(source, "actor.parameters",
               fmt::format("{} values; the sizes need {}", ap.size(), count(actor_sizes)));
  }
  if (cp.size() != count(critic_sizes)) {
    return Bad(source, "critic.parameters",
               fmt::format("{} values; the sizes need {}", cp.size(), count(critic_sizes)));
  }
  HEADROOM_ASSIGN_OR_RETURN(normalizer, keys.Member(j, "", "normalizer"));
  HEADROOM_ASSIGN_OR_RETURN(mean, keys.Get<std::vector<double>>(*normalizer, "normalizer", "mean"));
  HEADROOM_ASSIGN_OR_RETURN(var, keys.Get<std::vector<double>>(*normalizer, "normalizer", "var"));
  if (mean.size() != kFeatureNames.size() || var.size() != kFeatureNames.size()) {
    return Bad(source, "normalizer", fmt::format("needs {} means and variances", kFeatureCount));
  }
  for (double v : var) {
    if (!(v >= 0.0)) return Bad(source, "normalizer.var", "variances must be >= 0");
  }
  HEADROOM_ASSIGN_OR_RETURN(count_member,
                            keys.Member(*normalizer, "normalizer", "count", /*required=*/false));
  double normalizer_count = 1.0;
  if (count_member != nullptr && !count_member->is_null()) {
    HEADROOM_ASSIGN_OR_RETURN(c, keys.Get<double>(*normalizer, "normalizer", "count"));
    normalizer_count = c;
  }
  p.net = rl::ActorCritic(kFeatureCount, {kConcurrencyMoves, kGroupLevels, kPowerLimitLevels},
                          hidden, 0);
  p.net.actor().SetParameters(
      Eigen::Map<const Eigen::VectorXd>(ap.data(), static_cast<Eigen::Index>(ap.size())));
  p.net.critic().SetParameters(
      Eigen::Map<const Eigen::VectorXd>(cp.data(), static_cast<Eigen::Index>(cp.size())));
  p.normalizer.Set(Eigen::Map<const Eigen::VectorXd>(mean.data(), kFeatureCount),
                   Eigen::Map<const Eigen::VectorXd>(var.data(), kFeatureCount), normalizer_count);
  return OkStatus();
}

// The shield's rule; absent (or null): the default.
Result<ShieldRule> ReadShield(const json& j, const Keys& keys, std::string_view source) {
  ShieldRule shield;
  HEADROOM_ASSIGN_OR_RETURN(shield_member, keys.Member(j, "", "shield", /*required=*/false));
  if (shield_member != nullptr && !shield_member->is_null()) {
    const json& sj = *shield_member;
    HEADROOM_ASSIGN_OR_RETURN(margin, keys.Get<double>(sj, "shield", "margin"));
    HEADROOM_ASSIGN_OR_RETURN(sustain, keys.Get<int>(sj, "shield", "sustain"));
    HEADROOM_ASSIGN_OR_RETURN(cut, keys.Get<double>(sj, "shield", "cut"));
    HEADROOM_ASSIGN_OR_RETURN(hold_s, keys.Get<double>(sj, "shield", "hold_s"));
    HEADROOM_ASSIGN_OR_RETURN(decrease_cap_s, keys.Get<double>(sj, "shield", "decrease_cap_s"));
    HEADROOM_ASSIGN_OR_RETURN(settle_s, keys.Get<double>(sj, "shield", "settle_s"));
    HEADROOM_ASSIGN_OR_RETURN(bound_member, keys.Member(sj, "shield", "bound_admission"));
    if (!bound_member->is_boolean())
      return Bad(source, "shield.bound_admission", "expected true or false");
    if (!(margin >= 0.0 && margin < 0.5)) return Bad(source, "shield.margin", "expected [0, 0.5)");
    if (sustain < 1 || sustain > 10000) return Bad(source, "shield.sustain", "expected [1, 10000]");
    if (!(cut > 0.0 && cut <= 1.0)) return Bad(source, "shield.cut", "expected (0, 1]");
    for (const auto& [key, v] :
         {std::pair{"shield.hold_s", hold_s}, std::pair{"shield.decrease_cap_s", decrease_cap_s},
          std::pair{"shield.settle_s", settle_s}}) {
      if (!(v >= 0.0 && v <= 3600.0)) return Bad(source, key, "expected seconds in [0, 3600]");
    }
    shield = {margin, sustain, cut, hold_s, decrease_cap_s, bound_member->get<bool>(), settle_s};
  }
  return shield;
}

// One envelope per scenario trained on, in its order (none to read when upgrading).
Result<std::vector<PolicyEnvelope>> ReadEnvelopes(const json& j, const Keys& keys,
                                                  std::string_view source,
                                                  const std::vector<std::string>& trained_on) {
  std::vector<PolicyEnvelope> envelopes;
  HEADROOM_ASSIGN_OR_RETURN(envelopes_member, keys.Member(j, "", "envelopes"));
  if (!envelopes_member->is_array() || envelopes_member->size() > 64) {
    return Bad(source, "envelopes", "expected an array of at most 64 envelopes");
  }
  for (size_t i = 0; i < envelopes_member->size(); ++i) {
    auto e =
        EnvelopeFromJson((*envelopes_member)[i], fmt::format("envelopes[{}]", i), keys, source);
    if (!e) return std::move(e).error();
    envelopes.push_back(std::move(*e));
  }
  if (envelopes.size() != trained_on.size()) {
    return Bad(source, "envelopes",
               fmt::format("{} envelopes for {} scenarios in trained_on: one each",
                           envelopes.size(), trained_on.size()));
  }
  for (size_t i = 0; i < envelopes.size(); ++i) {
    if (envelopes[i].scenario != trained_on[i]) {
      return Bad(
          source, fmt::format("envelopes[{}].scenario", i),
          fmt::format("'{}'; trained_on names '{}' there", envelopes[i].scenario, trained_on[i]));
    }
  }
  return envelopes;
}

}  // namespace

Result<Policy> PolicyFromJson(std::string_view text, std::string_view source, PolicyRead read) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse errors, and numbers out of range
    return Error::Input(fmt::format("{}: not JSON: {}", source, e.what()));
  }
  HEADROOM_ASSIGN_OR_RETURN(upgradable, CheckFormat(j, source, read));
  const Keys keys(source);
  if (Status st = CheckVocabulary(j, keys, source); !st) return std::move(st).error();
  Policy p;
  if (Status st = ReadNetwork(j, keys, source, p); !st) return std::move(st).error();
  HEADROOM_ASSIGN_OR_RETURN(trained_on, keys.GetOr<std::vector<std::string>>(j, "trained_on", {}));
  HEADROOM_ASSIGN_OR_RETURN(trained_budget, keys.GetOr<std::string>(j, "trained_budget", ""));
  HEADROOM_ASSIGN_OR_RETURN(violation_target, keys.GetOr<double>(j, "violation_target", 0.01));
  HEADROOM_ASSIGN_OR_RETURN(cost_window_s, keys.GetOr<double>(j, "cost_window_s", 0.5));
  HEADROOM_ASSIGN_OR_RETURN(actuators, keys.GetOr<std::vector<std::string>>(
                                           j, "actuators", {"concurrency", "group_size"}));
  HEADROOM_ASSIGN_OR_RETURN(timesteps, keys.GetOr<long long>(j, "timesteps", 0));
  HEADROOM_ASSIGN_OR_RETURN(seed, keys.GetOr<unsigned long long>(j, "seed", 0));
  HEADROOM_ASSIGN_OR_RETURN(command, keys.GetOr<std::string>(j, "command", ""));
  HEADROOM_ASSIGN_OR_RETURN(shield, ReadShield(j, keys, source));
  HEADROOM_ASSIGN_OR_RETURN(fraction, keys.GetOr<double>(j, "control_budget_fraction", 1.0));
  if (!(fraction >= 0.5 && fraction <= 1.0)) {
    return Bad(source, "control_budget_fraction", fmt::format("{}; expected 0.5 to 1", fraction));
  }
  std::vector<PolicyEnvelope> envelopes;
  if (!upgradable) {
    HEADROOM_ASSIGN_OR_RETURN(read_envelopes, ReadEnvelopes(j, keys, source, trained_on));
    envelopes = std::move(read_envelopes);
  }

  if (actuators == std::vector<std::string>{"group_size"}) {
    p.group_size_only = true;
  } else if (actuators == std::vector<std::string>{"concurrency"}) {
    p.fixed_group_size = true;
  } else if (actuators != std::vector<std::string>{"concurrency", "group_size"}) {
    return Bad(source, "actuators",
               "expected [\"concurrency\", \"group_size\"], [\"concurrency\"] or "
               "[\"group_size\"]");
  }
  p.trained_on = std::move(trained_on);
  p.envelopes = std::move(envelopes);
  p.trained_budget = std::move(trained_budget);
  p.violation_target = violation_target;
  p.cost_window_s = cost_window_s;
  p.timesteps = timesteps;
  p.seed = seed;
  p.command = std::move(command);
  p.shield = shield;
  p.control_budget_fraction = fraction;
  return p;
}

#undef HEADROOM_ASSIGN_OR_RETURN

Result<Policy> LoadPolicy(const std::string& path, PolicyRead read) {
  auto text = ReadFileCapped(path, kMaxPolicyBytes);
  if (!text) return std::move(text).error();
  return PolicyFromJson(*text, path, read);
}

const PolicyEnvelope* FindEnvelope(const Policy& policy, std::string_view scenario) {
  for (const PolicyEnvelope& e : policy.envelopes) {
    if (e.scenario == scenario) return &e;
  }
  return nullptr;
}

std::optional<Admission> TrainedAdmission(const Policy& policy) {
  if (policy.envelopes.empty()) return std::nullopt;
  const Admission first = policy.envelopes.front().admission;
  for (const PolicyEnvelope& e : policy.envelopes) {
    if (e.admission != first) return std::nullopt;
  }
  return first;
}

Command CommandFromActions(const ActuatorLimits& limits, const int* actions, int concurrency,
                           double budget_w) {
  Command c;
  const int level =
      NearestConcurrencyLevel(limits.concurrency, concurrency) + actions[0] - kConcurrencyMoves / 2;
  c.concurrency =
      ConcurrencyAtLevel(limits.concurrency, std::clamp(level, 0, kConcurrencyLevels - 1));
  c.group_size = GroupAtLevel(limits.group_size, actions[1]);
  c.power_limit_w =
      kPowerLimitFractions[static_cast<size_t>(std::clamp(actions[2], 0, kPowerLimitLevels - 1))] *
      budget_w;
  return c;
}

PolicyController::PolicyController(const Policy& policy, ActuatorLimits limits)
    : policy_(policy), limits_(limits), x_(kFeatureCount) {}

Command PolicyController::Decide(const Inputs& given) {
  Inputs derated;
  if (policy_.control_budget_fraction != 1.0) {
    derated = given;
    derated.budget_w = given.budget_w * policy_.control_budget_fraction;
  }
  const Inputs& in = policy_.control_budget_fraction != 1.0 ? derated : given;
  features_.Compute(in, limits_, x_.data());
  const Eigen::VectorXd z = policy_.normalizer.Apply(x_);
  policy_.net.actor().ForwardOne(z, &logits_, &scratch_);
  int actions[kActionHeads];
  rl::Argmax(policy_.net.heads(), logits_.data(), actions);
  Command c = CommandFromActions(limits_, actions, in.concurrency, in.budget_w);
  if (policy_.group_size_only) {
    c.concurrency.reset();
    c.power_limit_w.reset();
  }
  if (policy_.fixed_group_size) c.group_size.reset();
  return c;
}

}  // namespace headroom::control
