#include "diloco_core/run_report.h"

#include <algorithm>
#include <fstream>

#include "common/json_fields.h"

namespace headroom::diloco {

using nlohmann::json;

namespace {

json TotalsJson(const RunTotals& t) {
  json curve = json::array();
  for (const LossPoint& p : t.loss_curve) {
    curve.push_back({{"tokens", p.tokens}, {"val_loss", p.val_loss}});
  }
  return {{"run", t.run},
          {"mode", t.mode},
          {"workers", t.workers},
          {"rounds", t.rounds},
          {"inner_steps", t.inner_steps},
          {"tokens", t.tokens},
          {"final_val_loss", t.final_val_loss},
          {"val_bits_per_byte", t.final_val_loss / kLn2},
          {"bytes_sent_total", t.bytes_sent_total},
          {"membership_changes", t.membership_changes},
          {"evictions", t.evictions},
          {"hashes_agreed", t.hashes_agreed},
          {"overhead_fraction", t.overhead_fraction},
          {"energy_j",
           {{"compute", t.energy_j.compute},
            {"network", t.energy_j.network},
            {"idle", t.energy_j.idle},
            {"other_cpu", t.energy_j.other_cpu},
            {"coordination", t.energy_j.coordination()}}},
          {"loss_curve", curve}};
}

void AddToTarget(json& j, const std::optional<ToTarget>& t) {
  if (!t) return;
  j["to_target"] = {{"target_loss", t->target_loss},
                    {"reached", t->reached},
                    {"tokens", t->tokens},
                    {"wall_s", t->wall_s},
                    {"energy_j", t->energy_j}};
}

RunTotals ReadTotals(JsonObject& o) {
  RunTotals t;
  t.run = o.String("run");
  t.mode = o.String("mode");
  t.workers = o.Integer<int>("workers");
  t.rounds = o.Integer<int>("rounds");
  t.inner_steps = o.Integer<int>("inner_steps");
  t.tokens = o.Integer<std::uint64_t>("tokens");
  t.final_val_loss = o.Number("final_val_loss");
  (void)o.Number("val_bits_per_byte");  // written from final_val_loss: there, and a number
  t.bytes_sent_total = o.Integer<std::uint64_t>("bytes_sent_total");
  t.membership_changes = o.Integer<int>("membership_changes");
  t.evictions = o.Integer<int>("evictions");
  t.hashes_agreed = o.Bool("hashes_agreed");
  t.overhead_fraction = o.Number("overhead_fraction");
  JsonObject energy = o.Object("energy_j");
  t.energy_j.compute = energy.Number("compute");
  t.energy_j.network = energy.Number("network");
  t.energy_j.idle = energy.Number("idle");
  t.energy_j.other_cpu = energy.Number("other_cpu");
  (void)energy.Number("coordination");  // written as their sum: there, and a number
  for (JsonObject p : o.Objects("loss_curve")) {
    t.loss_curve.push_back({p.Integer<std::uint64_t>("tokens"), p.Number("val_loss")});
  }
  if (o.Has("to_target")) {
    JsonObject g = o.Object("to_target");
    t.to_target =
        ToTarget{g.Number("target_loss"), g.Bool("reached"), g.Integer<std::uint64_t>("tokens"),
                 g.Number("wall_s"), g.Number("energy_j")};
  }
  return t;
}

json SecondsJson(const PhaseSeconds& s) {
  return {{"compute", s.compute}, {"communicate", s.communicate}, {"wait", s.wait},
          {"recover", s.recover}, {"throttled", s.throttled},     {"wall", s.wall}};
}

PhaseSeconds ReadSeconds(JsonObject o) {
  return {o.Number("compute"), o.Number("communicate"), o.Number("wait"),
          o.Number("recover"), o.Number("throttled"),   o.Number("wall")};
}

}  // namespace

EnergyJ EnergyOf(const EnergyInputs& in, const EnergyModel& model) {
  return {.compute = in.compute_cpu_s * model.cpu_watts_per_core,
          .network = static_cast<double>(in.bytes_sent) * model.network_j_per_byte,
          .idle = in.wait_s * model.idle_watts_per_worker,
          .other_cpu = in.other_cpu_s * model.cpu_watts_per_core};
}

ToTarget ToTargetOf(const std::vector<LossPoint>& curve, double target_loss,
                    std::uint64_t run_tokens, double run_wall_s, double run_energy_j) {
  for (const LossPoint& p : curve) {
    if (!(p.val_loss <= target_loss)) continue;
    const double wall_s = p.at_s >= 0.0 ? std::min(p.at_s, run_wall_s) : run_wall_s;
    const double share = run_wall_s > 0.0 ? wall_s / run_wall_s : 1.0;
    return {target_loss, true, p.tokens, wall_s, run_energy_j * share};
  }
  return {target_loss, false, run_tokens, run_wall_s, run_energy_j};
}

json ToJson(const WorkerReportFile& r) {
  json j = TotalsJson(r.totals);
  AddToTarget(j, r.totals.to_target);
  j["worker"] = {{"name", r.name},
                 {"member", r.member},
                 {"rounds_contributed", r.rounds_contributed},
                 {"resyncs", r.resyncs},
                 {"leaves", r.leaves},
                 {"bytes_received", r.bytes_received},
                 {"seconds", SecondsJson(r.seconds)},
                 {"cpu_seconds", {{"compute", r.compute_cpu_s}, {"other", r.other_cpu_s}}},
                 {"log", r.log}};
  if (!r.checkpoint.empty()) j["checkpoint"] = r.checkpoint;
  return j;
}

Result<WorkerReportFile> WorkerReportFromJson(const json& j, std::string_view where) {
  JsonFields fields{std::string(where)};
  JsonObject o = fields.Root(j);
  WorkerReportFile r;
  r.totals = ReadTotals(o);
  JsonObject w = o.Object("worker");
  r.name = w.String("name");
  r.member = w.String("member");
  r.rounds_contributed = w.Integer<int>("rounds_contributed");
  r.resyncs = w.Integer<int>("resyncs");
  r.leaves = w.Integer<int>("leaves");
  r.bytes_received = w.Integer<std::uint64_t>("bytes_received");
  r.seconds = ReadSeconds(w.Object("seconds"));
  JsonObject cpu = w.Object("cpu_seconds");
  r.compute_cpu_s = cpu.Number("compute");
  r.other_cpu_s = cpu.Number("other");
  r.log = w.Strings("log");
  if (o.Has("checkpoint")) r.checkpoint = o.String("checkpoint");
  if (!fields.ok()) return Error::Input(fields.message());
  return r;
}

json ToJson(const RunSummaryFile& s) {
  json j = TotalsJson(s.totals);
  AddToTarget(j, s.totals.to_target);
  j["wall_s"] = s.wall_s;
  j["rounds_done_at_s"] = s.rounds_done_at_s;
  j["out"] = s.out;
  json rows = json::array();
  for (const WorkerRow& w : s.workers_detail) {
    rows.push_back({{"name", w.name},
                    {"seconds", SecondsJson(w.seconds)},
                    {"bytes_sent", w.bytes_sent},
                    {"rounds_contributed", w.rounds_contributed},
                    {"resyncs", w.resyncs},
                    {"leaves", w.leaves}});
  }
  j["workers_detail"] = rows;
  if (!s.checkpoint.empty()) j["checkpoint"] = s.checkpoint;
  if (s.churn) {
    j["churn"] = {{"killed", s.churn->killed},
                  {"killed_in_round", s.churn->killed_in_round},
                  {"next_round_after_s", s.churn->next_round_after_s},
                  {"joined_in_round", s.churn->joined_in_round}};
  }
  return j;
}

Result<RunSummaryFile> RunSummaryFromJson(const json& j, std::string_view where) {
  JsonFields fields{std::string(where)};
  JsonObject o = fields.Root(j);
  RunSummaryFile s;
  s.totals = ReadTotals(o);
  s.wall_s = o.Number("wall_s");
  s.rounds_done_at_s = o.Numbers("rounds_done_at_s");
  s.out = o.String("out");
  for (JsonObject w : o.Objects("workers_detail")) {
    s.workers_detail.push_back({w.String("name"), ReadSeconds(w.Object("seconds")),
                                w.Integer<std::uint64_t>("bytes_sent"),
                                w.Integer<int>("rounds_contributed"), w.Integer<int>("resyncs"),
                                w.Integer<int>("leaves")});
  }
  if (o.Has("checkpoint")) s.checkpoint = o.String("checkpoint");
  if (o.Has("churn")) {
    JsonObject c = o.Object("churn");
    s.churn = ChurnFigures{c.String("killed"), c.Integer<int>("killed_in_round"),
                           c.Number("next_round_after_s"), c.Integer<int>("joined_in_round")};
  }
  if (!fields.ok()) return Error::Input(fields.message());
  return s;
}

Result<WorkerReportFile> ReadWorkerReport(const std::string& path) {
  std::ifstream f(path);
  if (!f) return Error::Io(path + ": cannot open the worker's report");
  const json j = json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error::Input(path + ": not JSON");
  return WorkerReportFromJson(j, path);
}

}  // namespace headroom::diloco
