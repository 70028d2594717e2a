// The run's report files (diloco_core/run_report.h): written and read in one place, every key
// required (a report missing any one is refused, naming it and the file), and what is read
// writes the same document again.
#include "diloco_core/run_report.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace headroom::diloco {
namespace {

using nlohmann::json;

WorkerReportFile AWorkerReport() {
  WorkerReportFile f;
  f.totals = {.run = "r",
              .mode = "diloco",
              .workers = 1,
              .rounds = 3,
              .inner_steps = 10,
              .tokens = 30720,
              .final_val_loss = 2.5,
              .bytes_sent_total = 123456789012ULL,
              .membership_changes = 2,
              .evictions = 1,
              .hashes_agreed = true,
              .overhead_fraction = 0.25,
              .energy_j = {.compute = 10.5, .network = 0.25, .idle = 15.0, .other_cpu = 5.0},
              .loss_curve = {{10240, 4.0}, {30720, 2.5}},
              .to_target = ToTarget{3.0, true, 30720, 9.5, 27.0}};
  f.name = "worker-0";
  f.member = "0000000000001000";
  f.rounds_contributed = 3;
  f.resyncs = 1;
  f.leaves = 0;
  f.bytes_received = 99;
  f.seconds = {7.5, 1.0, 1.5, 0.25, 0.5, 10.75};
  f.compute_cpu_s = 7.0;
  f.other_cpu_s = 2.0;
  f.log = {"round 0: joined", "round 2: donor"};
  f.checkpoint = "/tmp/r/model.ckpt";
  return f;
}

RunSummaryFile ASummary() {
  RunSummaryFile s;
  s.totals = AWorkerReport().totals;
  s.totals.workers = 4;
  s.wall_s = 12.5;
  s.rounds_done_at_s = {3.0, 6.5, 9.0};
  s.out = "/tmp/r";
  s.workers_detail = {{"worker-0", {7.5, 1, 1.5, 0, 0, 10}, 123, 3, 0, 0},
                      {"worker-2", {6.5, 2, 1.5, 0.5, 0, 10.5}, 456, 2, 1, 1}};
  s.checkpoint = "/tmp/r/model.ckpt";
  s.churn = ChurnFigures{"worker-1", 1, 4.5, 2};
  return s;
}

// "worker.seconds.wall", "loss_curve[0].val_loss" from a JSON pointer.
std::string PathOf(const json::json_pointer& p) {
  std::string path;
  const std::string text = p.to_string();  // "/worker/seconds/wall"
  size_t at = 1;
  while (at <= text.size()) {
    const size_t next = std::min(text.find('/', at), text.size());
    const std::string token = text.substr(at, next - at);
    const bool index = !token.empty() && token.find_first_not_of("0123456789") == std::string::npos;
    path += index ? "[" + token + "]" : (path.empty() ? "" : ".") + token;
    at = next + 1;
  }
  return path;
}

// Every key of `j` that holds a value or an object (not an array's element), as pointers.
std::vector<json::json_pointer> KeysOf(const json& j,
                                       const json::json_pointer& at = json::json_pointer()) {
  std::vector<json::json_pointer> out;
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      out.push_back(at / key);
      for (const auto& inner : KeysOf(value, at / key)) out.push_back(inner);
    }
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) {
      for (const auto& inner : KeysOf(j[i], at / i)) out.push_back(inner);
    }
  }
  return out;
}

TEST(RunReport, AWorkerReportReadsBackAsWritten) {
  const WorkerReportFile f = AWorkerReport();
  const json j = ToJson(f);
  EXPECT_EQ(j["worker"]["seconds"]["wall"], 10.75);
  EXPECT_EQ(j["val_bits_per_byte"], 2.5 / kLn2);
  auto read = WorkerReportFromJson(j, "w.json");
  ASSERT_TRUE(read.ok()) << read.error().message();
  EXPECT_EQ(ToJson(*read), j);
  EXPECT_EQ(read->totals.bytes_sent_total, 123456789012ULL);
  EXPECT_EQ(read->log, f.log);
  EXPECT_EQ(read->seconds.throttled, 0.5);

  WorkerReportFile no_checkpoint = f;
  no_checkpoint.checkpoint.clear();
  const json k = ToJson(no_checkpoint);
  EXPECT_FALSE(k.contains("checkpoint"));
  auto read_k = WorkerReportFromJson(k, "w.json");
  ASSERT_TRUE(read_k.ok()) << read_k.error().message();
  EXPECT_EQ(ToJson(*read_k), k);
}

TEST(RunReport, ARunSummaryReadsBackAsWritten) {
  const json j = ToJson(ASummary());
  auto read = RunSummaryFromJson(j, "summary.json");
  ASSERT_TRUE(read.ok()) << read.error().message();
  EXPECT_EQ(ToJson(*read), j);
  ASSERT_TRUE(read->churn.has_value());
  EXPECT_EQ(read->churn->killed, "worker-1");
  ASSERT_EQ(read->workers_detail.size(), 2u);
  EXPECT_EQ(read->workers_detail[1].leaves, 1);

  RunSummaryFile calm = ASummary();
  calm.churn.reset();
  calm.checkpoint.clear();
  const json k = ToJson(calm);
  EXPECT_FALSE(k.contains("churn"));
  auto read_k = RunSummaryFromJson(k, "summary.json");
  ASSERT_TRUE(read_k.ok()) << read_k.error().message();
  EXPECT_FALSE(read_k->churn.has_value());
  EXPECT_EQ(ToJson(*read_k), k);
}

// A renamed or dropped key is an error naming it and the file, never a 0.
TEST(RunReport, AReportMissingAnyKeyIsRefusedNamingTheKeyAndTheFile) {
  const json full = ToJson(AWorkerReport());
  int checked = 0;
  for (const json::json_pointer& p : KeysOf(full)) {
    const std::string path = PathOf(p);
    if (path == "checkpoint" || path == "to_target") continue;  // optional
    json j = full;
    j[p.parent_pointer()].erase(p.back());
    auto read = WorkerReportFromJson(j, "out/worker-0.json");
    ASSERT_FALSE(read.ok()) << path;
    EXPECT_EQ(read.error().kind(), ErrorKind::kInput);
    EXPECT_EQ(read.error().message(), "out/worker-0.json: field '" + path + "': missing");
    ++checked;
  }
  EXPECT_GT(checked, 30);

  const json summary = ToJson(ASummary());
  for (const json::json_pointer& p : KeysOf(summary)) {
    const std::string path = PathOf(p);
    if (path == "checkpoint" || path == "churn" || path == "to_target") continue;  // optional
    json j = summary;
    j[p.parent_pointer()].erase(p.back());
    auto read = RunSummaryFromJson(j, "summary.json");
    ASSERT_FALSE(read.ok()) << path;
    EXPECT_EQ(read.error().message(), "summary.json: field '" + path + "': missing");
  }
}

TEST(RunReport, EnergyIsSplitAndCoordinationIsTheSumOfItsThreeParts) {
  const EnergyJ e = EnergyOf(
      {.compute_cpu_s = 7.0, .other_cpu_s = 2.0, .wait_s = 4.0, .bytes_sent = 1000000},
      {.cpu_watts_per_core = 10.0, .idle_watts_per_worker = 3.0, .network_j_per_byte = 1e-6});
  EXPECT_DOUBLE_EQ(e.compute, 70.0);
  EXPECT_DOUBLE_EQ(e.network, 1.0);
  EXPECT_DOUBLE_EQ(e.idle, 12.0);
  EXPECT_DOUBLE_EQ(e.other_cpu, 20.0);
  EXPECT_DOUBLE_EQ(e.coordination(), 33.0);
  EXPECT_DOUBLE_EQ(e.total(), 103.0);

  const json j = ToJson(AWorkerReport());
  EXPECT_EQ(j["energy_j"]["coordination"], 20.25);  // 0.25 + 15 + 5
  EXPECT_EQ(j["to_target"]["target_loss"], 3.0);
  EXPECT_EQ(j["to_target"]["reached"], true);
  WorkerReportFile no_target = AWorkerReport();
  no_target.totals.to_target.reset();
  EXPECT_FALSE(ToJson(no_target).contains("to_target"));
  auto read = WorkerReportFromJson(ToJson(no_target), "w.json");
  ASSERT_TRUE(read.ok()) << read.error().message();
  EXPECT_FALSE(read->totals.to_target.has_value());
}

TEST(RunReport, ToTargetStopsAtTheFirstPointAtOrBelowTheTarget) {
  // Losses 4.0, 3.0, 3.5 (a bump), 2.0 after 10, 20, 30 and 40 s of a 50 s run of 200 J.
  const std::vector<LossPoint> curve = {
      {100, 4.0, 0, 10.0}, {200, 3.0, 1, 20.0}, {300, 3.5, 2, 30.0}, {400, 2.0, 3, 40.0}};
  ToTarget t = ToTargetOf(curve, 3.0, 400, 50.0, 200.0);
  EXPECT_TRUE(t.reached);
  EXPECT_EQ(t.target_loss, 3.0);
  EXPECT_EQ(t.tokens, 200u);
  EXPECT_DOUBLE_EQ(t.wall_s, 20.0);
  EXPECT_DOUBLE_EQ(t.energy_j, 80.0);  // 20 of 50 s

  t = ToTargetOf(curve, 2.5, 400, 50.0, 200.0);  // not the bump: the first point at or below
  EXPECT_EQ(t.tokens, 400u);
  EXPECT_DOUBLE_EQ(t.energy_j, 160.0);

  t = ToTargetOf(curve, 1.0, 400, 50.0, 200.0);  // never: the whole run, a lower bound
  EXPECT_FALSE(t.reached);
  EXPECT_EQ(t.tokens, 400u);
  EXPECT_DOUBLE_EQ(t.wall_s, 50.0);
  EXPECT_DOUBLE_EQ(t.energy_j, 200.0);

  // A point whose time is not known counts the whole run's time and energy.
  t = ToTargetOf({{100, 2.0}}, 3.0, 400, 50.0, 200.0);
  EXPECT_TRUE(t.reached);
  EXPECT_DOUBLE_EQ(t.wall_s, 50.0);
  EXPECT_DOUBLE_EQ(t.energy_j, 200.0);

  // A NaN loss never reaches a target.
  t = ToTargetOf({{100, std::nan("")}}, 3.0, 400, 50.0, 200.0);
  EXPECT_FALSE(t.reached);
}

TEST(RunReport, AKeyOfTheWrongTypeIsRefusedNamingIt) {
  json j = ToJson(AWorkerReport());
  j["tokens"] = "many";
  auto read = WorkerReportFromJson(j, "w.json");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().message(), "w.json: field 'tokens': expected an integer >= 0");
  j = ToJson(AWorkerReport());
  j["worker"]["log"] = {1, 2};
  read = WorkerReportFromJson(j, "w.json");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().message(), "w.json: field 'worker.log': expected an array of strings");
}

TEST(RunReport, AWorkerReportFileIsReadNamingTheFile) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("run_report_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "worker-0.json").string();
  EXPECT_EQ(ReadWorkerReport(path).error().kind(), ErrorKind::kIo);  // not there
  json j = ToJson(AWorkerReport());
  std::ofstream(path) << j.dump(2);
  auto read = ReadWorkerReport(path);
  ASSERT_TRUE(read.ok()) << read.error().message();
  EXPECT_EQ(read->name, "worker-0");
  j["worker"]["seconds"].erase("compute");
  std::ofstream(path) << j.dump(2);
  read = ReadWorkerReport(path);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().message(), path + ": field 'worker.seconds.compute': missing");
  std::ofstream(path) << "{not json";
  EXPECT_EQ(ReadWorkerReport(path).error().message(), path + ": not JSON");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace headroom::diloco
