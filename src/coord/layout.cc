#include "coord/layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/json_fields.h"

namespace headroom::coord {

using nlohmann::json;

Keys::Keys(std::string_view site) : root(fmt::format("/headroom/{}/", site)) {}

std::string Keys::duplicate(std::string_view job, int64_t lease) const {
  return fmt::format("{}{}@{:x}", members(), job, lease);
}

bool IsHeldPhase(std::string_view phase) {
  return phase == "idle" || phase == "startup" || phase == "stopped";
}

double StandbyChargeW(const Member& m) {
  if (!(m.standby_w >= 0.0) || !IsHeldPhase(m.phase)) return m.floor_w;
  return std::min(m.standby_w, m.floor_w);
}

bool IsSlurmJobId(std::string_view id) {
  const auto digits = [](std::string_view s) {
    if (s.empty() || s.size() > 18 || s[0] == '0') return false;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
    }
    return true;
  };
  const size_t underscore = id.find('_');
  if (underscore == std::string_view::npos) return digits(id);
  const std::string_view task = id.substr(underscore + 1);
  return digits(id.substr(0, underscore)) && (task == "0" || digits(task));
}

Status CheckName(std::string_view name, std::string_view what) {
  if (name.empty() || name.size() > 64) {
    return Error::Usage(fmt::format("{} '{}': expected 1 to 64 characters", what, name));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return Error::Usage(
          fmt::format("{} '{}': expected letters, digits, '.', '_' or '-' only", what, name));
    }
  }
  return OkStatus();
}

double Ledger::HeldW() const {
  double sum = StandbyW();
  for (const auto& [job, j] : jobs) sum += j.held_w;
  return sum;
}

double Ledger::HeldW(JobClass c) const {
  double sum = c == JobClass::kGuaranteed ? StandbyW() : 0.0;
  for (const auto& [job, j] : jobs) {
    if (j.job_class == c) sum += j.held_w;
  }
  return sum;
}

double Ledger::StandbyW() const {
  double sum = 0.0;
  for (const auto& [job, s] : standby) sum += s.standby_w;
  return sum;
}

double Ledger::OvercommittedW() const {
  const double budget_w =
      std::min(site_budget_w, target_site_budget_w) - std::max(reserve_w, TargetReserveW());
  return std::max(0.0, FloorsW() + StandbyW() - budget_w);
}

double Ledger::FloorsW() const {
  double sum = 0.0;
  for (const auto& [job, j] : jobs) sum += j.floor_w;
  return sum;
}

namespace {

// Readers (common/json_fields.h): every field present and of its type; watts finite and
// >= 0, seconds from 0 to a year.
double Watts(JsonObject& r, const char* key) {
  const double v = r.Number(key);
  if (r.ok() && !(v >= 0.0 && v < 1e12)) r.Fail(key, "expected watts >= 0");
  return v;
}

double Seconds(JsonObject& r, const char* key) {
  const double v = r.Number(key);
  if (r.ok() && !(v >= 0.0 && v <= 366.0 * 86400.0)) r.Fail(key, "expected seconds >= 0");
  return v;
}

// Absent is "", present must be a string.
std::string OptionalString(JsonObject& r, const char* key) {
  if (!r.ok() || !r.value().contains(key)) return {};
  return r.String(key);
}

// "class": absent is guaranteed.
void ReadJobClass(JsonObject& r, JobClass& out) {
  const std::string c = OptionalString(r, "class");
  if (c.empty() || c == "guaranteed") {
    out = JobClass::kGuaranteed;
  } else if (c == "opportunistic") {
    out = JobClass::kOpportunistic;
  } else {
    r.Fail("class", "expected \"guaranteed\" or \"opportunistic\"");
  }
}

Result<json> Parse(std::string_view text, std::string_view where) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Error::Input(fmt::format("{}: not a JSON object", where));
  }
  // "v": this reader's version or the one before; absent: before versions.
  if (auto v = j.find("v"); v != j.end()) {
    if (!v->is_number_integer() || v->get<int64_t>() < 0) {
      return Error::Input(
          fmt::format("{}: field 'v': expected a version (an integer >= 0)", where));
    }
    if (v->get<int64_t>() > kValueVersion) {
      return Error::Input(fmt::format(
          "{}: field 'v': version {} is newer than this reader's ({}): written by a newer headroom",
          where, v->get<int64_t>(), kValueVersion));
    }
  }
  return j;
}

}  // namespace

const char* JobClassName(JobClass c) {
  return c == JobClass::kOpportunistic ? "opportunistic" : "guaranteed";
}

std::string ToJson(const Member& m) {
  json curve = json::array();
  for (const ValuePoint& p : m.value_curve)
    curve.push_back(json::array({p.budget_w, p.tokens_per_s}));
  json j{{"v", kValueVersion},
         {"job", m.job},
         {"gpus", m.gpus},
         {"nameplate_w", m.nameplate_w},
         {"floor_w", m.floor_w},
         {"demand_w", m.demand_w},
         {"power_w", m.power_w},
         {"node_overhead_w", m.node_overhead_w},
         {"phase", m.phase},
         {"value_tokens_per_j", m.value_tokens_per_j},
         {"budget_w", m.budget_w},
         {"lease", m.lease},
         {"holder", m.holder},
         {"value_curve", curve},
         {"class", JobClassName(m.job_class)}};
  if (!m.slurm_job.empty()) j["slurm_job"] = m.slurm_job;
  if (!m.replaces.empty()) j["replaces"] = m.replaces;
  if (m.standby_w >= 0.0) j["standby_w"] = m.standby_w;
  if (m.update_w > 0.0) j["update_w"] = m.update_w;
  if (m.domain) j["domain"] = true;
  if (m.has_timeline) {
    const StepTimeline& t = m.timeline;
    j["timeline"] = {{"step", t.step},
                     {"in_rollout", t.in_rollout},
                     {"phase_elapsed_s", t.phase_elapsed_s},
                     {"rollout_s", t.rollout_s},
                     {"rest_s", t.rest_s},
                     {"rollout_w", t.rollout_w},
                     {"rest_w", t.rest_w},
                     {"held_w", t.held_w},
                     {"held_left_s", t.held_left_s},
                     {"tokens_per_s", m.tokens_per_s}};
  }
  return j.dump();
}

std::string ToJson(const Grant& g) {
  return json{{"v", kValueVersion},     {"job", g.job},
              {"term", g.term},         {"seq", g.seq},
              {"lease", g.lease},       {"job_budget_w", g.job_budget_w},
              {"admitted", g.admitted}, {"reason", g.reason},
              {"hold_s", g.hold_s},     {"hold_step", g.hold_step},
              {"epoch", g.epoch}}
      .dump();
}

std::string ToJson(const Ack& a) {
  return json{{"v", kValueVersion}, {"job", a.job},     {"term", a.term},
              {"seq", a.seq},       {"lease", a.lease}, {"job_budget_w", a.job_budget_w}}
      .dump();
}

std::string ToJson(const Ledger& l) {
  json jobs = json::object();
  for (const auto& [name, j] : l.jobs) {
    jobs[name] = {{"floor_w", j.floor_w},
                  {"demand_w", j.demand_w},
                  {"grant_w", j.grant_w},
                  {"held_w", j.held_w},
                  {"seq", j.seq},
                  {"lease", j.lease},
                  {"class", JobClassName(j.job_class)}};
    if (j.standby_w >= 0.0) jobs[name]["standby_w"] = j.standby_w;
    if (j.step_s > 0.0) jobs[name]["step_s"] = j.step_s;
    if (j.domain) jobs[name]["domain"] = true;
    if (!j.holder.empty()) jobs[name]["holder"] = j.holder;
  }
  json out{{"v", kValueVersion},
           {"term", l.term},
           {"request_id", l.request_id},
           {"site_budget_w", l.site_budget_w},
           {"target_site_budget_w", l.target_site_budget_w},
           {"reserve_w", l.reserve_w},
           {"seq", l.seq},
           {"reassignments", l.reassignments},
           {"jobs", jobs}};
  if (l.target_reserve_w >= 0.0) out["target_reserve_w"] = l.target_reserve_w;
  if (l.target_revision > 0) out["target_revision"] = l.target_revision;
  if (!l.standby.empty()) {
    json standby = json::object();
    for (const auto& [name, s] : l.standby) {
      standby[name] = {{"standby_w", s.standby_w},
                       {"floor_w", s.floor_w},
                       {"lease", s.lease},
                       {"duplicate", s.duplicate}};
      if (s.fenced_gone_s >= 0.0) standby[name]["fenced_gone_s"] = s.fenced_gone_s;
    }
    out["standby"] = standby;
  }
  return out.dump();
}

std::string ToJson(const Target& t) {
  return json{{"v", kValueVersion},
              {"site_budget_w", t.site_budget_w},
              {"reserve_w", t.reserve_w},
              {"request_id", t.request_id}}
      .dump();
}

Result<Target> TargetFromJson(std::string_view text, std::string_view where) {
  auto j = Parse(text, where);
  if (!j) return std::move(j).error();
  JsonFields fields{std::string(where)};
  JsonObject r = fields.Root(*j);
  Target t;
  t.site_budget_w = Watts(r, "site_budget_w");
  t.reserve_w = Watts(r, "reserve_w");
  t.request_id = r.String("request_id");
  if (r.ok() && !(t.site_budget_w > t.reserve_w)) {
    r.Fail("reserve_w", "expected below site_budget_w");
  }
  if (!fields.ok()) return Error::Input(fields.message());
  return t;
}

Result<Member> MemberFromJson(std::string_view text, std::string_view where) {
  auto j = Parse(text, where);
  if (!j) return std::move(j).error();
  JsonFields fields{std::string(where)};
  JsonObject r = fields.Root(*j);
  Member m;
  m.job = r.String("job");
  m.gpus = static_cast<int>(r.Int64("gpus"));
  m.nameplate_w = Watts(r, "nameplate_w");
  m.floor_w = Watts(r, "floor_w");
  m.demand_w = Watts(r, "demand_w");
  m.power_w = Watts(r, "power_w");
  m.node_overhead_w = Watts(r, "node_overhead_w");
  m.phase = r.String("phase");
  m.value_tokens_per_j = r.Number("value_tokens_per_j");
  m.budget_w = Watts(r, "budget_w");
  m.lease = r.Int64("lease");
  m.holder = OptionalString(r, "holder");
  m.slurm_job = OptionalString(r, "slurm_job");
  m.replaces = OptionalString(r, "replaces");
  if (r.ok() && j->contains("standby_w")) m.standby_w = Watts(r, "standby_w");
  if (r.ok() && j->contains("update_w")) m.update_w = Watts(r, "update_w");
  if (r.ok() && j->contains("domain")) m.domain = r.Bool("domain");
  ReadJobClass(r, m.job_class);
  if (r.ok() && j->contains("value_curve")) {
    const json& c = (*j)["value_curve"];
    if (!c.is_array() || c.size() > kMaxValuePoints) {
      r.Fail("value_curve", fmt::format("expected an array of at most {} [budget_w, tokens_per_s]",
                                        kMaxValuePoints));
    } else {
      for (const json& p : c) {
        if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number() ||
            !(p[0].get<double>() >= 0.0 && p[0].get<double>() < 1e12) ||
            !(p[1].get<double>() >= 0.0 && p[1].get<double>() < 1e15)) {
          r.Fail("value_curve", "expected [budget_w, tokens_per_s] pairs of finite numbers >= 0");
          break;
        }
        m.value_curve.push_back({p[0].get<double>(), p[1].get<double>()});
      }
    }
  }
  if (r.ok()) {
    if (auto st = CheckName(m.job, "job"); !st) r.Fail("job", st.error().message());
    if (m.gpus < 1 || m.gpus > 1 << 20) r.Fail("gpus", "expected 1 or more");
    if (m.floor_w > m.demand_w) r.Fail("floor_w", "above demand_w");
    if (m.holder.size() > 512) r.Fail("holder", "longer than 512 bytes");
    if (m.replaces.size() > 512) r.Fail("replaces", "longer than 512 bytes");
    if (!m.slurm_job.empty() && !IsSlurmJobId(m.slurm_job)) {
      r.Fail("slurm_job", "expected a Slurm job id (digits, optionally _TASK)");
    }
    if (m.job_class == JobClass::kOpportunistic && m.floor_w != 0.0) {
      r.Fail("floor_w", "expected 0 for an opportunistic job (it pauses at a grant of 0)");
    }
  }
  if (r.ok() && j->contains("timeline")) {
    JsonObject t = r.Object("timeline");
    if (t.ok()) {
      StepTimeline& tl = m.timeline;
      tl.step = t.Int64("step");
      tl.in_rollout = t.Bool("in_rollout");
      tl.phase_elapsed_s = Seconds(t, "phase_elapsed_s");
      tl.rollout_s = Seconds(t, "rollout_s");
      tl.rest_s = Seconds(t, "rest_s");
      tl.rollout_w = Watts(t, "rollout_w");
      tl.rest_w = Watts(t, "rest_w");
      tl.held_w = Watts(t, "held_w");
      tl.held_left_s = Seconds(t, "held_left_s");
      m.tokens_per_s = Watts(t, "tokens_per_s");  // the same bounds: finite, >= 0
      if (!fields.ok()) return Error::Input(fields.message());
      m.has_timeline = true;
    }
  }
  if (!fields.ok()) return Error::Input(fields.message());
  return m;
}

Result<Grant> GrantFromJson(std::string_view text, std::string_view where) {
  auto j = Parse(text, where);
  if (!j) return std::move(j).error();
  JsonFields fields{std::string(where)};
  JsonObject r = fields.Root(*j);
  Grant g;
  g.job = r.String("job");
  g.term = r.Int64("term");
  g.seq = r.Int64("seq");
  g.lease = r.Int64("lease");
  g.job_budget_w = Watts(r, "job_budget_w");
  g.admitted = r.Bool("admitted");
  g.reason = r.String("reason");
  if (r.ok() && j->contains("hold_s")) {
    g.hold_s = Seconds(r, "hold_s");
    g.hold_step = r.Int64("hold_step");
  }
  if (r.ok() && j->contains("epoch")) {
    g.epoch = r.Int64("epoch");
    if (r.ok() && g.epoch < 0) r.Fail("epoch", "expected a revision >= 0");
  }
  if (!fields.ok()) return Error::Input(fields.message());
  return g;
}

Result<Ack> AckFromJson(std::string_view text, std::string_view where) {
  auto j = Parse(text, where);
  if (!j) return std::move(j).error();
  JsonFields fields{std::string(where)};
  JsonObject r = fields.Root(*j);
  Ack a;
  a.job = r.String("job");
  a.term = r.Int64("term");
  a.seq = r.Int64("seq");
  a.lease = r.Int64("lease");
  a.job_budget_w = Watts(r, "job_budget_w");
  if (!fields.ok()) return Error::Input(fields.message());
  return a;
}

Result<Ledger> LedgerFromJson(std::string_view text, std::string_view where) {
  auto j = Parse(text, where);
  if (!j) return std::move(j).error();
  JsonFields fields{std::string(where)};
  JsonObject r = fields.Root(*j);
  Ledger l;
  l.term = r.Int64("term");
  l.request_id = r.String("request_id");
  l.site_budget_w = Watts(r, "site_budget_w");
  l.target_site_budget_w = Watts(r, "target_site_budget_w");
  l.reserve_w = Watts(r, "reserve_w");
  l.seq = r.Int64("seq");
  l.reassignments = static_cast<uint64_t>(r.Int64("reassignments"));
  if (r.ok() && j->contains("target_reserve_w")) {
    l.target_reserve_w = Watts(r, "target_reserve_w");
  }
  if (r.ok() && j->contains("target_revision")) {
    l.target_revision = r.Int64("target_revision");
  }
  JsonObject jobs = r.Object("jobs");  // each job's fields named "jobs.NAME.KEY"
  for (const auto& [name, value] : jobs.value().items()) {
    JsonObject jr = jobs.Object(name);
    LedgerJob job;
    job.floor_w = Watts(jr, "floor_w");
    job.demand_w = Watts(jr, "demand_w");
    job.grant_w = Watts(jr, "grant_w");
    job.held_w = Watts(jr, "held_w");
    job.seq = jr.Int64("seq");
    job.lease = jr.Int64("lease");
    ReadJobClass(jr, job.job_class);
    if (jr.ok() && value.contains("standby_w")) job.standby_w = Watts(jr, "standby_w");
    if (jr.ok() && value.contains("step_s")) job.step_s = Watts(jr, "step_s");
    if (jr.ok() && value.contains("domain")) job.domain = jr.Bool("domain");
    if (jr.ok() && value.contains("holder")) job.holder = jr.String("holder");
    if (!fields.ok()) return Error::Input(fields.message());
    l.jobs[name] = job;
  }
  if (r.ok() && j->contains("standby")) {
    JsonObject standby = r.Object("standby");
    for (const auto& [name, value] : standby.value().items()) {
      JsonObject sr = standby.Object(name);
      StandbyJob s;
      s.standby_w = Watts(sr, "standby_w");
      s.floor_w = Watts(sr, "floor_w");
      s.lease = sr.Int64("lease");
      s.duplicate = sr.Bool("duplicate");
      if (sr.ok() && value.contains("fenced_gone_s")) {
        s.fenced_gone_s = Watts(sr, "fenced_gone_s");  // a finite number >= 0
      }
      if (!fields.ok()) return Error::Input(fields.message());
      if (l.jobs.contains(name)) {
        return Error::Input(fmt::format("{}: job '{}' both admitted and in standby", where, name));
      }
      l.standby[name] = s;
    }
  }
  if (!fields.ok()) return Error::Input(fields.message());
  return l;
}

}  // namespace headroom::coord
