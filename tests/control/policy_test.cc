#include "control/policy.h"

#include "control/factory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace headroom::control {
namespace {

using ::testing::HasSubstr;

Policy Small() {
  Policy p;
  p.net =
      rl::ActorCritic(kFeatureCount, {kConcurrencyMoves, kGroupLevels, kPowerLimitLevels}, {8}, 3);
  p.normalizer = rl::Normalizer(kFeatureCount);
  p.trained_on = {"a100-7b-tp1"};
  PolicyEnvelope e;
  e.scenario = "a100-7b-tp1";
  e.budget_w = 314.6;
  e.budget_range_w = {260.0, 400.0};
  e.limits.concurrency = {1, 16};
  e.limits.group_size = {4, 16};
  e.limits.nameplate_w = 400.0;
  e.limits.power_limit_min_w = 100.0;
  e.limits.power_limit_rise_w = 20.0;
  e.concurrency = 16;
  e.group_size = 8;
  p.envelopes = {e};
  return p;
}

TEST(Policy, JsonRoundTripKeepsEveryDecision) {
  Policy p = Small();
  Eigen::VectorXd params = p.net.actor().Parameters();
  for (Eigen::Index i = 0; i < params.size(); ++i) params(i) = std::sin(1.0 + i);
  p.net.actor().SetParameters(params);
  auto back = PolicyFromJson(PolicyToJson(p), "p.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_TRUE(back->net.actor().Parameters().isApprox(params, 1e-15));
  EXPECT_EQ(back->trained_on, p.trained_on);
}

TEST(Policy, ControllerMapsTheArgmaxToLevels) {
  Policy p = Small();
  // Zero weights; biases pick the move -1 level, group level 4 and power-limit level 2.
  Eigen::VectorXd params = Eigen::VectorXd::Zero(p.net.actor().ParameterCount());
  p.net.actor().SetParameters(params);
  p.net.actor().biases().back()(1) = 1.0;
  p.net.actor().biases().back()(kConcurrencyMoves + 4) = 1.0;
  p.net.actor().biases().back()(kConcurrencyMoves + kGroupLevels + 2) = 1.0;
  ActuatorLimits l;
  l.concurrency = {1, 16};
  l.group_size = {4, 16};
  l.nameplate_w = 400.0;
  PolicyController c(p, l);
  std::vector<double> power{250.0};
  Inputs in;
  in.budget_w = 300.0;
  in.smoothed_power_w = power;
  in.concurrency = 16;
  in.group_size = 8;
  const Command cmd = c.Decide(in);
  EXPECT_EQ(*cmd.concurrency, 11);  // 16 is level 8 of 9 on log2 [1, 16]; one down: 2^3.5
  EXPECT_EQ(*cmd.group_size, 16);   // level 4 of 5 on [4, 16]
  EXPECT_NEAR(*cmd.power_limit_w, 0.96 * 300.0, 1e-9);  // level 2: 0.96 x the budget
}

// An efficiency variant (control_budget_fraction, `headroom policy derate`): the controller acts
// exactly as the same network does on the derated budget -- its features (power against the
// budget) and its power-limit levels see budget x fraction -- and the fraction survives JSON;
// absent means 1, and outside [0.5, 1] the file is refused naming the key.
TEST(Policy, ADeratedPolicyActsAsTheSameNetworkOnTheDeratedBudget) {
  Policy p = Small();
  Eigen::VectorXd params = p.net.actor().Parameters();
  for (Eigen::Index i = 0; i < params.size(); ++i) params(i) = std::sin(3.0 + 0.7 * i);
  p.net.actor().SetParameters(params);
  ActuatorLimits l;
  l.concurrency = {1, 16};
  l.group_size = {4, 16};
  l.nameplate_w = 400.0;
  Policy derated = p;
  derated.control_budget_fraction = 0.83;
  PolicyController plain(p, l), variant(derated, l);
  for (double watts : {180.0, 240.0, 260.0, 300.0, 330.0}) {
    std::vector<double> power{watts};
    Inputs in;
    in.budget_w = 314.6;
    in.smoothed_power_w = power;
    in.concurrency = 16;
    in.group_size = 8;
    Inputs lower = in;
    lower.budget_w = 314.6 * 0.83;
    const Command a = variant.Decide(in);
    const Command b = plain.Decide(lower);
    EXPECT_EQ(a.concurrency, b.concurrency) << watts;
    EXPECT_EQ(a.group_size, b.group_size) << watts;
    EXPECT_EQ(a.power_limit_w, b.power_limit_w) << watts;
  }
  auto back = PolicyFromJson(PolicyToJson(derated), "e.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->control_budget_fraction, 0.83);
  EXPECT_EQ(PolicyToJson(p).find("control_budget_fraction"), std::string::npos);
  auto j = nlohmann::json::parse(PolicyToJson(derated));
  j["control_budget_fraction"] = 0.3;
  auto bad = PolicyFromJson(j.dump(), "e.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error().message(), HasSubstr("control_budget_fraction"));
  EXPECT_THAT(bad.error().message(), HasSubstr("expected 0.5 to 1"));
}

TEST(Policy, PowerLimitLevelZeroIsNoLimitAndAGroupOnlyPolicySetsNone) {
  ActuatorLimits l;
  l.concurrency = {1, 16};
  l.group_size = {4, 16};
  const int none[kActionHeads] = {2, 0, 0};
  EXPECT_EQ(*CommandFromActions(l, none, 4, 300.0).power_limit_w, 0.0);
  const int deepest[kActionHeads] = {2, 0, kPowerLimitLevels - 1};
  EXPECT_NEAR(*CommandFromActions(l, deepest, 4, 300.0).power_limit_w, 0.86 * 300.0, 1e-9);
  Policy p = Small();
  p.group_size_only = true;
  p.net.actor().SetParameters(Eigen::VectorXd::Zero(p.net.actor().ParameterCount()));
  p.net.actor().biases().back()(kConcurrencyMoves + kGroupLevels + 3) = 1.0;
  PolicyController c(p, l);
  std::vector<double> power{250.0};
  Inputs in;
  in.budget_w = 300.0;
  in.smoothed_power_w = power;
  in.concurrency = 4;
  const Command cmd = c.Decide(in);
  EXPECT_FALSE(cmd.concurrency.has_value());
  EXPECT_FALSE(cmd.power_limit_w.has_value());
}

TEST(Policy, AFixedGroupPolicyMovesConcurrencyAndThePowerLimitNeverTheGroup) {
  ActuatorLimits l;
  l.concurrency = {1, 16};
  l.group_size = {4, 16};
  Policy p = Small();
  p.fixed_group_size = true;
  // Round trip: the file says what it may move.
  const std::string text = PolicyToJson(p);
  EXPECT_EQ(nlohmann::json::parse(text)["actuators"], nlohmann::json::array({"concurrency"}));
  auto back = PolicyFromJson(text, "fixed.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_TRUE(back->fixed_group_size);
  EXPECT_FALSE(back->group_size_only);
  // Whatever the group head says, the command leaves the group size as it is.
  back->net.actor().SetParameters(Eigen::VectorXd::Zero(back->net.actor().ParameterCount()));
  back->net.actor().biases().back()(kConcurrencyMoves + kGroupLevels - 1) = 5.0;  // largest group
  PolicyController c(*back, l);
  std::vector<double> power{250.0};
  Inputs in;
  in.budget_w = 300.0;
  in.smoothed_power_w = power;
  in.concurrency = 4;
  in.group_size = 8;
  const Command cmd = c.Decide(in);
  EXPECT_FALSE(cmd.group_size.has_value());
  EXPECT_TRUE(cmd.concurrency.has_value());
}

// Version 4 carries where it was trained: each scenario's budgets, ranges and defaults, read
// back as written; version 3 is refused with the command that upgrades it, which reads it.
TEST(Policy, CarriesItsEnvelopesAndRefusesVersion3WithTheUpgrade) {
  const Policy p = Small();
  auto back = PolicyFromJson(PolicyToJson(p), "p.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  ASSERT_EQ(back->envelopes.size(), 1u);
  const PolicyEnvelope& e = back->envelopes[0];
  EXPECT_EQ(e.scenario, "a100-7b-tp1");
  EXPECT_EQ(e.budget_w, 314.6);
  EXPECT_EQ(e.budget_range_w, (std::pair{260.0, 400.0}));
  EXPECT_EQ(e.limits.concurrency.lo, 1);
  EXPECT_EQ(e.limits.concurrency.hi, 16);
  EXPECT_EQ(e.limits.group_size.lo, 4);
  EXPECT_EQ(e.limits.group_size.hi, 16);
  EXPECT_EQ(e.limits.nameplate_w, 400.0);
  EXPECT_EQ(e.limits.power_limit_min_w, 100.0);
  EXPECT_EQ(e.limits.power_limit_rise_w, 20.0);
  EXPECT_EQ(e.concurrency, 16);
  EXPECT_EQ(e.group_size, 8);
  EXPECT_EQ(FindEnvelope(*back, "a100-7b-tp1"), &back->envelopes[0]);
  EXPECT_EQ(FindEnvelope(*back, "h100-8b-tp1"), nullptr);

  nlohmann::json v3 = nlohmann::json::parse(PolicyToJson(p));
  v3["version"] = 3;
  v3.erase("envelopes");
  auto refused = PolicyFromJson(v3.dump(), "old.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.error().message(),
              HasSubstr("old.json: key 'version': 3: it predates the envelopes"));
  EXPECT_THAT(refused.error().message(), HasSubstr("headroom policy upgrade old.json NEW"));
  auto upgradable = PolicyFromJson(v3.dump(), "old.json", PolicyRead::kUpgrade);
  ASSERT_TRUE(upgradable.ok()) << upgradable.error().message();
  EXPECT_TRUE(upgradable->envelopes.empty());
  EXPECT_EQ(upgradable->trained_on, p.trained_on);

  const auto edit = [&](auto f) {
    nlohmann::json j = nlohmann::json::parse(PolicyToJson(p));
    f(j);
    return PolicyFromJson(j.dump(), "p.json");
  };
  auto r = edit([](nlohmann::json& j) { j.erase("envelopes"); });
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("p.json: key 'envelopes': missing"));
  r = edit([](nlohmann::json& j) { j["envelopes"] = nlohmann::json::array(); });
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("0 envelopes for 1 scenarios in trained_on"));
  r = edit([](nlohmann::json& j) { j["envelopes"][0]["scenario"] = "h100-8b-tp1"; });
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("key 'envelopes[0].scenario'"));
  r = edit([](nlohmann::json& j) { j["envelopes"][0]["budget_range_w"] = {400.0, 260.0}; });
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("key 'envelopes[0].budget_range_w'"));
  r = edit([](nlohmann::json& j) { j["envelopes"][0]["group_size"] = 32; });
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("key 'envelopes[0].group_size': outside"));
  r = edit([](nlohmann::json& j) { j["envelopes"][0]["nameplate_w"] = "400"; });
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("key 'envelopes[0].nameplate_w': expected a number"));
}

// Each envelope records how its trainer admits sequences; files of before that load as
// continuous, and the policy's one admission is there only when every envelope agrees.
TEST(Policy, RecordsTheAdmissionItWasTrainedFor) {
  Policy p = Small();
  EXPECT_EQ(p.envelopes[0].admission, Admission::kContinuous);  // the default
  // Continuous is left out: the bytes of a file of before the key.
  nlohmann::json written = nlohmann::json::parse(PolicyToJson(p));
  EXPECT_FALSE(written["envelopes"][0].contains("admission"));
  EXPECT_EQ(TrainedAdmission(p), Admission::kContinuous);

  p.envelopes[0].admission = Admission::kChunked;
  written = nlohmann::json::parse(PolicyToJson(p));
  EXPECT_EQ(written["envelopes"][0]["admission"], "chunked");
  auto back = PolicyFromJson(written.dump(), "p.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->envelopes[0].admission, Admission::kChunked);
  EXPECT_EQ(TrainedAdmission(*back), Admission::kChunked);

  // A file written before the field: continuous.
  written["envelopes"][0].erase("admission");
  back = PolicyFromJson(written.dump(), "old.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->envelopes[0].admission, Admission::kContinuous);

  for (const nlohmann::json& bad :
       {nlohmann::json("Chunked"), nlohmann::json(1), nlohmann::json::array({"chunked"})}) {
    written["envelopes"][0]["admission"] = bad;
    auto r = PolicyFromJson(written.dump(), "p.json");
    ASSERT_FALSE(r.ok()) << bad.dump();
    EXPECT_THAT(r.error().message(),
                HasSubstr("p.json: key 'envelopes[0].admission': expected \"continuous\" or "
                          "\"chunked\""));
  }

  // Two envelopes that differ: no one admission, each envelope its own.
  Policy two = Small();
  two.trained_on.push_back("a100-14b-tp2");
  two.envelopes.push_back(two.envelopes[0]);
  two.envelopes[1].scenario = "a100-14b-tp2";
  two.envelopes[1].admission = Admission::kChunked;
  EXPECT_EQ(TrainedAdmission(two), std::nullopt);
  two.envelopes[0].admission = Admission::kChunked;
  EXPECT_EQ(TrainedAdmission(two), Admission::kChunked);
  two.envelopes.clear();
  EXPECT_EQ(TrainedAdmission(two), std::nullopt);
  EXPECT_EQ(ParseAdmission("chunked"), Admission::kChunked);
  EXPECT_EQ(ParseAdmission("continuous"), Admission::kContinuous);
  EXPECT_EQ(ParseAdmission("none"), std::nullopt);
}

TEST(Policy, RefusesOtherVersionsFamiliesAndShapes) {
  const std::string good = PolicyToJson(Small());
  auto edit = [&](auto f) {
    nlohmann::json j = nlohmann::json::parse(good);
    f(j);
    return PolicyFromJson(j.dump(), "p.json");
  };
  auto r = edit([](nlohmann::json& j) { j["version"] = 1; });
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(),
              HasSubstr("p.json: key 'version': 1; this headroom reads version 4"));
  r = edit([](nlohmann::json& j) { j["family"] = "training-clock"; });
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("key 'family'"));
  r = edit([](nlohmann::json& j) { j["features"].erase(0); });
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("key 'features'"));
  r = edit([](nlohmann::json& j) { j["heads"] = {9, 3}; });
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("key 'heads'"));
  r = edit([](nlohmann::json& j) { j["actor"]["parameters"].erase(0); });
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("key 'actor.parameters'"));
  r = PolicyFromJson("{\"format\": ", "p.json");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("p.json: not JSON"));
  r = PolicyFromJson("8e3333333333", "p.json");  // a number out of range (found by fuzzing)
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("p.json: not JSON"));
  r = edit([](nlohmann::json& j) {
    j["actor"]["sizes"] = {kFeatureCount,
                           4,
                           4,
                           4,
                           4,
                           4,
                           4,
                           4,
                           4,
                           4,
                           kConcurrencyMoves + kGroupLevels + kPowerLimitLevels};
  });
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("at most 8 hidden layers"));
  r = PolicyFromJson("[]", "p.json");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("not a headroom policy"));
}

// A value of the wrong type is one line naming the file and the key (it used to be nlohmann's
// "[json.exception.type_error.302] type must be number, but is string").
TEST(Policy, RecordsItsPhasesAndShieldAndRefusesAnotherVocabulary) {
  Policy p = Small();
  p.shield.margin = 0.03;
  p.shield.sustain = 3;
  p.shield.settle_s = 7.5;
  const std::string text = PolicyToJson(p);
  auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["phases"],
            nlohmann::json(std::vector<std::string>(kPhaseNames.begin(), kPhaseNames.end())));
  auto back = PolicyFromJson(text, "p.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->shield.margin, 0.03);
  EXPECT_EQ(back->shield.sustain, 3);
  EXPECT_EQ(back->shield.settle_s, 7.5);
  j["phases"][1] = "warmup";  // trained on another vocabulary
  auto other = PolicyFromJson(j.dump(), "p.json");
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(other.error().message(),
              HasSubstr("p.json: key 'phases': trained on [idle, warmup, rollout"));
  j.erase("phases");
  auto old = PolicyFromJson(j.dump(), "p.json");
  ASSERT_FALSE(old.ok());
  EXPECT_THAT(old.error().message(), HasSubstr("key 'phases': missing"));
  j = nlohmann::json::parse(text);
  j["shield"]["cut"] = 0.0;
  auto bad = PolicyFromJson(j.dump(), "p.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error().message(), HasSubstr("key 'shield.cut'"));
}

TEST(Factory, APolicyRunsInItsOwnShieldAndAGroupSizeOnlyOneAlone) {
  Policy p = Small();
  p.shield.sustain = 3;
  ControllerSpec spec;
  spec.kind = "ppo";
  spec.policy = &p;
  spec.limits.concurrency = {1, 16};
  spec.limits.group_size = {4, 16};
  auto built = MakeController(spec);
  ASSERT_TRUE(built.ok());
  ASSERT_NE(built->shield(), nullptr);
  EXPECT_EQ(built->get().name(), "ppo");
  p.cost_window_s = 30.0;  // a policy scored over 30 s: the rule stretched (ShieldFor)
  built = MakeController(spec);
  ASSERT_TRUE(built.ok());
  p.group_size_only = true;
  built = MakeController(spec);
  ASSERT_TRUE(built.ok());
  EXPECT_EQ(built->shield(), nullptr);  // nothing to cut: no shield
  spec.kind = "static";
  spec.label = "static-safe";
  spec.concurrency = 6;
  spec.group_size = 12;
  built = MakeController(spec);
  ASSERT_TRUE(built.ok());
  EXPECT_EQ(built->get().name(), "static-safe");
  EXPECT_EQ(*built->get().Decide(Inputs{}).concurrency, 6);
  spec.kind = "bang-bang";
  auto unknown = MakeController(spec);
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.error().message(), HasSubstr("unknown controller 'bang-bang'"));
  spec.kind = "ppo";
  spec.policy = nullptr;
  EXPECT_FALSE(MakeController(spec).ok());
}

TEST(Policy, TypeErrorsNameTheKey) {
  const std::string good = PolicyToJson(Small());
  const auto error = [&](auto f) {
    nlohmann::json j = nlohmann::json::parse(good);
    f(j);
    auto r = PolicyFromJson(j.dump(), "p.json");
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.error().message();
  };
  using J = nlohmann::json;
  EXPECT_EQ(error([](J& j) { j["family"] = 3; }), "p.json: key 'family': expected a string");
  EXPECT_EQ(error([](J& j) { j["features"] = "all"; }),
            "p.json: key 'features': expected an array of strings");
  EXPECT_EQ(error([](J& j) {
              j["heads"] = {9, "x"};
            }),
            "p.json: key 'heads': expected an array of integers");
  EXPECT_EQ(error([](J& j) { j["actor"] = 5; }), "p.json: key 'actor': expected an object");
  EXPECT_EQ(error([](J& j) {
              j["actor"]["sizes"] = {kFeatureCount, 8.5, 14};
            }),
            "p.json: key 'actor.sizes': expected an array of integers");
  EXPECT_EQ(error([](J& j) { j["actor"]["parameters"][3] = "w"; }),
            "p.json: key 'actor.parameters': expected an array of numbers");
  EXPECT_EQ(error([](J& j) { j["critic"].erase("parameters"); }),
            "p.json: key 'critic.parameters': missing");
  EXPECT_EQ(error([](J& j) {
              j["normalizer"]["mean"] = {{"a", 1}};
            }),
            "p.json: key 'normalizer.mean': expected an array of numbers");
  EXPECT_EQ(error([](J& j) { j["normalizer"]["count"] = "many"; }),
            "p.json: key 'normalizer.count': expected a number");
  EXPECT_EQ(error([](J& j) { j["violation_target"] = "1%"; }),
            "p.json: key 'violation_target': expected a number");
  EXPECT_EQ(error([](J& j) { j["cost_window_s"] = true; }),
            "p.json: key 'cost_window_s': expected a number");
  EXPECT_EQ(error([](J& j) {
              j["trained_on"] = {1, 2};
            }),
            "p.json: key 'trained_on': expected an array of strings");
  EXPECT_EQ(error([](J& j) { j["timesteps"] = 1.5; }),
            "p.json: key 'timesteps': expected an integer");
  EXPECT_EQ(error([](J& j) { j["seed"] = -1; }), "p.json: key 'seed': expected an integer >= 0");
  EXPECT_EQ(error([](J& j) { j["command"] = J::array(); }),
            "p.json: key 'command': expected a string");
  EXPECT_EQ(error([](J& j) { j["actuators"] = "group_size"; }),
            "p.json: key 'actuators': expected an array of strings");
  // Optional keys may be absent or null.
  nlohmann::json j = nlohmann::json::parse(good);
  j.erase("timesteps");
  j["command"] = nullptr;
  EXPECT_TRUE(PolicyFromJson(j.dump(), "p.json").ok());
}

}  // namespace
}  // namespace headroom::control
