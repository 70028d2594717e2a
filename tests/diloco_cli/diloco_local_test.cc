// `headroom diloco` with real processes (the integration tier): worker processes on the real
// byte-level model, Gloo over loopback and a real etcd with auth on, against the replay's
// arithmetic bit for bit; a worker as a Slurm job suspended and resumed by the coordinator; bad
// input. The round protocol under each fault (churn, hostile workers, eviction, leave and
// rejoin, stragglers, the data-parallel baseline, a starting checkpoint, spare power) is tested
// in one process on a simulated clock: tests/diloco/worker_test.cc. Skipped without etcd.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/free_port.h"
#include "coord/layout.h"
#include "coord/member.h"
#include "etcd/etcd_store.h"
#include "slurm/batch_scheduler.h"
#include "support/etcd_cluster.h"
#include "support/slurm_cluster.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Outcome {
  int status = -1;
  json summary;
  std::string err;
};

class DilocoLocal : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access("/usr/bin/etcd", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/etcd";
    if (!fs::exists(std::string(HEADROOM_SOURCE_DIR) + "/build/corpus/train.txt")) {
      GTEST_SKIP() << "no corpus (scripts/setup.sh builds build/corpus)";
    }
    dir_ = fs::temp_directory_path() /
           ("headroom_diloco_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure() && !dir_.empty()) fs::remove_all(dir_);
  }

  // Small and quick: 3 or 4 tiny-model workers, H inner steps of 8 x 64 bytes.
  Outcome Local(const std::string& name, const std::string& args) {
    const fs::path out = dir_ / name;
    const fs::path err = dir_ / (name + ".stderr");
    const std::string line = std::string(HEADROOM_BINARY) +
                             " diloco local --batch 8 --seq-len 64 --val-windows 64 --out " +
                             out.string() + " --json " + args + " > " +
                             (dir_ / (name + ".json")).string() + " 2> " + err.string();
    Outcome o;
    o.status = std::system(line.c_str());
    std::ifstream e(err);
    std::stringstream s;
    s << e.rdbuf();
    o.err = s.str();
    std::ifstream j(dir_ / (name + ".json"));
    o.summary = json::parse(j, nullptr, false);
    return o;
  }

  fs::path dir_;
};

double Loss(const Outcome& o) { return o.summary["final_val_loss"].get<double>(); }

// energy_j's parts sum to coordination, and a target every evaluated loss is under (100
// nats/byte) is reached at the first evaluated round: its tokens, within the run's time and
// energy (a worker's report: the rounds it evaluated as the donor; none, never reached).
void ExpectEnergyToTarget(const json& report, double target_loss) {
  ASSERT_TRUE(report.is_object());
  const json& e = report["energy_j"];
  EXPECT_GT(e["compute"].get<double>(), 0.0);
  EXPECT_GT(e["network"].get<double>(), 0.0);
  EXPECT_GE(e["idle"].get<double>(), 0.0);
  EXPECT_GT(e["other_cpu"].get<double>(), 0.0);
  EXPECT_NEAR(e["coordination"].get<double>(),
              e["network"].get<double>() + e["idle"].get<double>() + e["other_cpu"].get<double>(),
              1e-9 * e["coordination"].get<double>());
  ASSERT_TRUE(report.contains("to_target")) << report.dump();
  const json& t = report["to_target"];
  EXPECT_EQ(t["target_loss"].get<double>(), target_loss);
  if (report["loss_curve"].empty()) {
    EXPECT_FALSE(t["reached"].get<bool>());
    return;
  }
  EXPECT_TRUE(t["reached"].get<bool>());
  EXPECT_EQ(t["tokens"].get<uint64_t>(), report["loss_curve"][0]["tokens"].get<uint64_t>());
  EXPECT_GT(t["wall_s"].get<double>(), 0.0);
  EXPECT_GT(t["energy_j"].get<double>(), 0.0);
  EXPECT_LE(t["energy_j"].get<double>(),
            e["compute"].get<double>() + e["coordination"].get<double>());
}

// `diloco replay` (dist/replay.h) is a run's arithmetic in one process: with every member in
// every round it ends on the real distributed run's validation loss, bit for bit (the same
// replicas, data streams, int8 error feedback, screen, trimmed mean and outer step); a
// schedule with a member out for a round resyncs it once and counts only the tokens trained.
TEST_F(DilocoLocal, AReplayOfEveryMemberEveryRoundEndsOnTheRealRunsLossBitForBit) {
  // The real run on an etcd with auth on: a user allowed /headroom-diloco/ only (base64 below),
  // its password in a file, as the workers and `control` take it.
  std::string why;
  auto etcd = headroom::etcd_test::EtcdCluster::Start(1, &why);
  ASSERT_TRUE(etcd) << why;
  const std::string url = etcd->endpoint(0);
  const std::string failed = etcd->EnableAuth(
      "trainer", "trainerpw", "L2hlYWRyb29tLWRpbG9jby8=", "L2hlYWRyb29tLWRpbG9jbzA=");
  ASSERT_TRUE(failed.empty()) << failed;
  const std::string pw = (dir_ / "etcd.pw").string();
  std::ofstream(pw) << "trainerpw\n";
  const std::string auth = " --etcd " + url + " --etcd-user trainer --etcd-password-file " + pw;
  // Every member in every round, however slow the machine (an ASan build under a loaded CI):
  // the round's group waits up to 120 s for a late member, a collective up to 60 s, a lease 30 s.
  const Outcome real = Local("real",
                             "--workers 3 --inner-steps 8 --rounds 3 --round-deadline-s 120 "
                             "--collective-timeout-s 60 --lease-ttl-s 30 --target-loss 100" +
                                 auth);
  ASSERT_EQ(real.status, 0) << real.err;
  EXPECT_TRUE(real.summary["hashes_agreed"].get<bool>());
  ExpectEnergyToTarget(real.summary, 100.0);
  for (const char* worker : {"worker-0", "worker-1", "worker-2"}) {
    std::ifstream report(dir_ / "real" / (std::string(worker) + ".json"));
    ExpectEnergyToTarget(json::parse(report, nullptr, false), 100.0);
  }
  // `control` signs in the same way and merges into the worker's key.
  const std::string control = std::string(HEADROOM_BINARY) + " diloco control" + auth +
                              " --worker worker-1 --duty 0.5 > /dev/null";
  EXPECT_EQ(std::system(control.c_str()), 0);
  auto store = headroom::etcd::EtcdStore::Open(url, 2.0, {"trainer", "trainerpw"});
  ASSERT_TRUE(store) << store.error().message();
  auto key = (*store)->Get("/headroom-diloco/default/control/worker-1");
  ASSERT_TRUE(key && key->kvs.size() == 1);
  EXPECT_EQ(json::parse(key->kvs[0].value)["duty"].get<double>(), 0.5);
  const auto replay = [&](const std::string& name, const std::string& rows) {
    const fs::path schedule = dir_ / (name + ".csv");
    std::ofstream(schedule) << "# a schedule\nround,workers\n" << rows;
    const std::string line = std::string(HEADROOM_BINARY) + " diloco replay --schedule " +
                             schedule.string() +
                             " --workers 3 --inner-steps 8 --batch 8 --seq-len 64 "
                             "--val-windows 64 --json > " +
                             (dir_ / (name + ".json")).string() + " 2> /dev/null";
    EXPECT_EQ(std::system(line.c_str()), 0) << line;
    std::ifstream j(dir_ / (name + ".json"));
    return json::parse(j, nullptr, false);
  };
  const json all = replay("all", "0,3\n1,3\n2,3\n");
  ASSERT_FALSE(all.is_discarded());
  EXPECT_EQ(all["final_val_loss"].get<double>(), Loss(real));
  EXPECT_EQ(all["tokens"].get<uint64_t>(), real.summary["tokens"].get<uint64_t>());
  EXPECT_EQ(all["resyncs"].get<int>(), 0);
  const json gap = replay("gap", "0,3\n1,2\n2,3\n");
  ASSERT_FALSE(gap.is_discarded());
  EXPECT_EQ(gap["resyncs"].get<int>(), 1);  // the third member, back in round 2
  EXPECT_EQ(gap["tokens"].get<uint64_t>(), uint64_t{(3 + 2 + 3) * 8 * 8 * 64});
  EXPECT_NE(gap["final_val_loss"].get<double>(), Loss(real));
  EXPECT_DOUBLE_EQ(gap["mean_members"].get<double>(), 8.0 / 3.0);
  // A bad schedule: one line naming the file, the line and the field; exit 1.
  const fs::path bad = dir_ / "bad.csv";
  std::ofstream(bad) << "round,workers\n0,3\n2,3\n";
  const std::string line = std::string(HEADROOM_BINARY) + " diloco replay --schedule " +
                           bad.string() + " 2> " + (dir_ / "bad.err").string();
  const int status = std::system(line.c_str());
  EXPECT_EQ(WEXITSTATUS(status), 1);
  std::ifstream e(dir_ / "bad.err");
  std::string err((std::istreambuf_iterator<char>(e)), std::istreambuf_iterator<char>());
  EXPECT_NE(err.find(bad.string() + ":3: field 'round': expected 1"), std::string::npos) << err;
}

// `--aggregate mean --stream-fragments 2` over Gloo, real processes: the first fragment sent
// half-way through rounds 1 and 2 on the last round's group from a thread of its own, while the
// inner steps go on, each exchange an all-to-all of int8 chunks and an all-gather of the owners'
// means. Every hash agrees every round, and the bytes are the formula's by hand: round 0 the
// last fragment only (no group to stream on yet), rounds 1 and 2 both, each fragment of m values
// 2 (k - 1) frames of its chunk (k = 3; the owners' means carry one reason byte per member).
TEST_F(DilocoLocal, TheMeanAndStreamingOverGlooAgreeEveryRoundAndMoveTheFormulasBytes) {
  const Outcome o = Local("stream",
                          "--workers 3 --inner-steps 8 --rounds 3 --aggregate mean "
                          "--stream-fragments 2 --round-deadline-s 120 --collective-timeout-s 60 "
                          "--lease-ttl-s 30");
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_TRUE(o.summary["hashes_agreed"].get<bool>());
  EXPECT_EQ(o.summary["membership_changes"].get<int>(), 0);
  // The tiny model's 495,360 values in blocks of 256: 1,935 blocks, fragments of 967 and 968.
  const std::uint64_t k = 3;
  const auto chunk_frame = [&](std::uint64_t m) {
    const std::uint64_t blocks = (m + 255) / 256;
    const std::uint64_t values = (blocks + k - 1) / k * 256;  // whole blocks per chunk
    return 28 + (8 + 4 * (values / 256) + values) + 32;       // header, int8, HMAC
  };
  const auto fragment = [&](std::uint64_t m) {
    return (k - 1) * (chunk_frame(m) + chunk_frame(m) + k);
  };
  const std::uint64_t first = 967 * 256, last = 495360 - first;
  EXPECT_EQ(o.summary["bytes_sent_total"].get<std::uint64_t>(),
            k * (fragment(last) + 2 * (fragment(first) + fragment(last))));
  EXPECT_TRUE(std::isfinite(Loss(o)));
}

// A free loopback port (the coordinator binds it next).
int FreePort() {
  auto port = headroom::FreeLoopbackPort();
  return port ? *port : -1;
}

// A child process killed (SIGTERM, then reaped) when this goes, pass or fail.
struct Child {
  pid_t pid = -1;
  explicit Child(const std::string& line) {
    pid = fork();
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c", ("exec " + line).c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGTERM);
      waitpid(pid, nullptr, 0);
    }
  }
};

// A site of 30 W for the spare-power tests: a real `headroom coordinator` (0.2 s periods,
// lease 2 s; `extra` appended to its command line) on `store`'s etcd, and a guaranteed job
// driven here through coord::SiteMember as its agent would: floor 5 W, all 30 W in rollout
// (phase demand), drawing 5 W. `phase` is the job's phase; StepUntil steps it every 50 ms until
// `done` holds or `limit_s` passes.
struct SpareSite {
  SpareSite(headroom::coord::Store& store, const std::string& url, const fs::path& dir,
            const std::string& extra)
      : coordinator(std::string(HEADROOM_BINARY) + " coordinator --etcd " + url +
                    " --site s --site-budget-w 30 --reserve-w 0 --period-s 0.2 --lease-ttl-s 2 " +
                    extra + " --listen 127.0.0.1:" + std::to_string(FreePort()) + " 2> " +
                    (dir / "coordinator.stderr").string()),
        job(
            store, Config(), [this] { return now_s(); }, [](const std::string&) {}),
        store_(store) {}

  static headroom::coord::MemberConfig Config() {
    headroom::coord::MemberConfig g;
    g.site = "s";
    g.job = "guaranteed";
    g.nameplate_w = 30;
    g.floor_w = 5;
    g.local_budget_w = 5;
    g.lease_ttl_s = 2;
    g.update_s = 0.2;
    g.phase_demand = true;
    return g;
  }
  double now_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  bool StepUntil(const std::function<bool()>& done, double limit_s) {
    const double until = now_s() + limit_s;
    while (now_s() < until) {
      job.Current();
      job.Observe(now_s(), 5, phase, 0);
      job.Step();
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  // The site's ledger as stored (none before the first write, or unreadable).
  std::optional<headroom::coord::Ledger> ledger() const {
    auto r = store_.Get("/headroom/s/ledger");
    if (!r || r->kvs.empty()) return std::nullopt;
    auto l = headroom::coord::LedgerFromJson(r->kvs[0].value, "ledger");
    if (!l) return std::nullopt;
    return *l;
  }

  const std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  Child coordinator;
  headroom::coord::SiteMember job;
  std::string phase = "train";

 private:
  headroom::coord::Store& store_;
};

// Issue 17's Slurm path, against real daemons (munged, slurmctld, slurmd started here): a
// worker runs as a Slurm job and publishes its SLURM_JOB_ID; when the guaranteed job takes the
// site's every watt the worker's grant goes to 0 and the coordinator (`--slurm`) suspends the
// job (`scontrol suspend`); when the job gives watts back, it resumes it, and the worker trains
// on them again.
// The state letter (/proc/PID/stat) of every process of Slurm job `id`, in one string.
std::string ProcessStates(headroom::slurm_test::SlurmCluster& slurm, const std::string& id) {
  std::string out;
  std::istringstream pids(slurm.Command("/usr/bin/scontrol listpids " + id +
                                        " 2>/dev/null | awk 'NR > 1 { print $1 }'"));
  for (std::string pid; pids >> pid;) {
    std::ifstream stat("/proc/" + pid + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto close = text.rfind(')');
    if (close != std::string::npos && close + 2 < text.size()) out += text[close + 2];
  }
  return out;
}

TEST_F(DilocoLocal, ASlurmWorkerIsSuspendedAndResumedByTheCoordinator) {
  const std::string unavailable = headroom::slurm_test::SlurmCluster::Available();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  std::string why;
  auto slurm = headroom::slurm_test::SlurmCluster::Start(&why);
  ASSERT_TRUE(slurm) << why;
  auto etcd = headroom::etcd_test::EtcdCluster::Start(1, &why);
  ASSERT_TRUE(etcd) << why;
  const std::string url = etcd->endpoint(0);
  auto store = headroom::etcd::EtcdStore::Open(url, 2.0, {});
  ASSERT_TRUE(store) << store.error().message();
  // The coordinator inherits SLURM_CONF (the cluster set it).
  SpareSite site(**store, url, dir_, "--slurm --suspend-after-s 1");
  const auto step_until = [&](const std::function<bool()>& done, double limit_s) {
    return site.StepUntil(done, limit_s);
  };
  std::string& phase = site.phase;
  // The worker's entry in the ledger (its member's name: RUN.NAME).
  const auto worker = [&]() -> std::optional<headroom::coord::LedgerJob> {
    const auto l = site.ledger();
    if (!l || !l->jobs.contains("r.w")) return std::nullopt;
    return l->jobs.at("r.w");
  };
  ASSERT_TRUE(step_until([&] { return site.ledger().has_value(); }, 30));
  const std::string line =
      std::string(HEADROOM_BINARY) + " diloco worker --etcd " + url + " --site-etcd etcd://" +
      url.substr(7) + " --site s --run r --name w --threads 1 --inner-steps 8 --rounds 100000 " +
      "--batch 8 --seq-len 64 --round-deadline-s 60 --lease-ttl-s 30 --val-windows 16 --out " +
      (dir_ / "run").string();
  const std::string id = slurm->Command("/usr/bin/sbatch --parsable -o " +
                                        (dir_ / "worker.out").string() + " --wrap '" + line + "'");
  ASSERT_TRUE(headroom::coord::IsSlurmJobId(id)) << "sbatch said: " << id;
  // Running, registered with its job id, granted watts (10 W of the 25 W the job leaves).
  ASSERT_TRUE(step_until([&] { return slurm->State(id) == "RUNNING"; }, 60)) << slurm->State(id);
  ASSERT_TRUE(step_until(
      [&] {
        const auto w = worker();
        return w && w->held_w > 9.9;
      },
      60))
      << "the worker never held its watts";
  auto m = (*store)->Get("/headroom/s/members/r.w");
  ASSERT_TRUE(m && m->kvs.size() == 1);
  EXPECT_NE(m->kvs[0].value.find("\"slurm_job\":\"" + id + "\""), std::string::npos)
      << m->kvs[0].value;
  // The job takes all 30 W: the worker's grant goes to 0, then Slurm suspends it.
  phase = "rollout";
  ASSERT_TRUE(step_until([&] { return slurm->State(id) == "SUSPENDED"; }, 30)) << slurm->State(id);
  // Suspended: every process of the job stopped (state T).
  const auto states = [&] { return ProcessStates(*slurm, id); };
  // slurmctld says SUSPENDED when it has told slurmd to stop the job: the SIGSTOPs follow, so
  // wait for every process to be stopped (seen once with one still 'S' under ASan on a loaded
  // machine).
  std::string stopped;
  EXPECT_TRUE(headroom::slurm_test::SlurmCluster::WaitFor(
      [&] {
        stopped = states();
        return !stopped.empty() && stopped.find_first_not_of('T') == std::string::npos;
      },
      10))
      << "process states: " << stopped;
  EXPECT_EQ(slurm->State(id), "SUSPENDED");
  // Back to little: resumed, and granted again.
  phase = "train";
  ASSERT_TRUE(step_until([&] { return slurm->State(id) == "RUNNING"; }, 30)) << slurm->State(id);
  ASSERT_TRUE(step_until(
      [&] {
        const auto w = worker();
        return w && w->held_w > 9.9;
      },
      60));
  std::ifstream log(dir_ / "coordinator.stderr");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("r.w: slurm job " + id + " suspended"), std::string::npos) << text;
  EXPECT_NE(text.find("r.w: slurm job " + id + " resumed"), std::string::npos) << text;
  // Cancelled: gone from the queue, and every process of it ended (before the daemons stop).
  std::vector<pid_t> pids;
  {
    std::istringstream in(slurm->Command("/usr/bin/scontrol listpids " + id +
                                         " 2>/dev/null | awk 'NR > 1 { print $1 }'"));
    for (pid_t pid; in >> pid;) pids.push_back(pid);
  }
  (void)slurm->Command("/usr/bin/scancel " + id);
  EXPECT_TRUE(headroom::slurm_test::SlurmCluster::WaitFor(
      [&] {
        return slurm->State(id).empty() &&
               std::none_of(pids.begin(), pids.end(), [](pid_t p) { return kill(p, 0) == 0; });
      },
      60));
  site.job.Leave();
}

TEST_F(DilocoLocal, BadInputIsOneLineAndExitTwo) {
  const Outcome o = Local("bad", "--compress int4");
  EXPECT_EQ(WEXITSTATUS(o.status), 2);
  EXPECT_NE(o.err.find("--compress: 'int4'"), std::string::npos) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1);
  // Refused before etcd or any worker starts.
  const Outcome model = Local("model", "--model huge");
  EXPECT_EQ(WEXITSTATUS(model.status), 2);
  EXPECT_NE(model.err.find("--model: 'huge' is not a model"), std::string::npos) << model.err;
  const Outcome target = Local("target", "--target-loss -1");
  EXPECT_EQ(WEXITSTATUS(target.status), 2);
  EXPECT_NE(target.err.find("--target-loss: -1 is not a finite number at least 0"),
            std::string::npos)
      << target.err;
  EXPECT_EQ(std::count(target.err.begin(), target.err.end(), '\n'), 1);
  // The new options: a bad aggregate or fragment count, and what replay does not replay.
  const Outcome aggregate = Local("aggregate", "--aggregate median");
  EXPECT_EQ(WEXITSTATUS(aggregate.status), 2);
  EXPECT_NE(aggregate.err.find("--aggregate: 'median' is not trimmed-mean or mean"),
            std::string::npos)
      << aggregate.err;
  const Outcome fragments = Local("fragments", "--stream-fragments 65");
  EXPECT_EQ(WEXITSTATUS(fragments.status), 2);
  EXPECT_NE(fragments.err.find("--stream-fragments: 65 is not between 1 and 64"), std::string::npos)
      << fragments.err;
  const fs::path schedule = dir_ / "schedule.csv";
  std::ofstream(schedule) << "round,workers\n0,2\n";
  for (const std::string& args : {std::string("--target-loss 1"), std::string("--aggregate mean"),
                                  std::string("--stream-fragments 2")}) {
    const std::string replay = std::string(HEADROOM_BINARY) + " diloco replay --schedule " +
                               schedule.string() + " --workers 2 " + args + " 2> " +
                               (dir_ / "replay.stderr").string();
    EXPECT_EQ(WEXITSTATUS(std::system(replay.c_str())), 2) << args;
    std::ifstream r(dir_ / "replay.stderr");
    std::string said((std::istreambuf_iterator<char>(r)), std::istreambuf_iterator<char>());
    EXPECT_NE(said.find("replay: "), std::string::npos) << args << ": " << said;
    EXPECT_EQ(std::count(said.begin(), said.end(), '\n'), 1) << said;
  }
  const std::string control = std::string(HEADROOM_BINARY) +
                              " diloco control --etcd http://127.0.0.1:9 --worker w --duty 2 2> " +
                              (dir_ / "control.stderr").string();
  EXPECT_EQ(WEXITSTATUS(std::system(control.c_str())), 2);
  // Names become etcd keys: a '/' would put one run's keys inside another's round (a ghost
  // arrival), an empty one is no name. Before: both accepted.
  for (const std::string& args : {std::string("--run a/b"), std::string("--run ''")}) {
    const Outcome named = Local("named", args);
    EXPECT_EQ(WEXITSTATUS(named.status), 2) << args;
    EXPECT_NE(named.err.find("--run: name '"), std::string::npos) << named.err;
  }
  const std::string worker = std::string(HEADROOM_BINARY) +
                             " diloco control --etcd http://127.0.0.1:9 --worker ../w 2> " +
                             (dir_ / "worker.stderr").string();
  EXPECT_EQ(WEXITSTATUS(std::system(worker.c_str())), 2);
  std::ifstream e(dir_ / "worker.stderr");
  std::string line;
  std::getline(e, line);
  EXPECT_NE(line.find("--worker: name '../w': expected letters, digits, '.', '_' or '-' only"),
            std::string::npos)
      << line;
}

}  // namespace
