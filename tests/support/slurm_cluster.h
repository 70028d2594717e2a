// A real Slurm for tests, on one machine: munged (as the munge user, its own key and socket),
// slurmctld and slurmd in the foreground with a private slurm.conf on free loopback ports, all
// in a temporary directory; stopped (SIGTERM, then SIGKILL) and removed when the object goes,
// pass or fail, and killed with the test process (PR_SET_PDEATHSIG). The test's SLURM_CONF is
// set to it, so sbatch, squeue and scontrol -- and children such as a coordinator -- use it.
//
// Needs Debian's slurm-wlm and munge (scripts/setup.sh installs them) and root (slurmd runs
// jobs as their users; SlurmUser=root). Available() says why not, for a skip.
//
// Not thread-safe; start and stop from the test's main thread.
#pragma once

#include "common/free_port.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace headroom::slurm_test {

class SlurmCluster {
 public:
  static constexpr double kReadyTimeoutS = 60.0;

  // "" when this machine can run one; else why not.
  static std::string Available() {
    for (const char* bin :
         {"/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sbatch",
          "/usr/bin/squeue", "/usr/bin/scontrol", "/usr/bin/sinfo"}) {
      if (access(bin, X_OK) != 0) return std::string("no ") + bin + " (slurm-wlm, munge)";
    }
    if (getuid() != 0) return "not root (slurmd runs jobs as their users)";
    if (getpwnam("munge") == nullptr) return "no munge user";
    return "";
  }

  static std::optional<SlurmCluster> Start(std::string* why) {
    SlurmCluster c;
    std::string pattern = (std::filesystem::temp_directory_path() / "headroom_slurm_XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      *why = std::string("mkdtemp: ") + std::strerror(errno);
      return std::nullopt;
    }
    c.dir_ = pattern;
    chmod(c.dir_.c_str(), 0711);  // munged wants every directory above its socket searchable
    const passwd* munge = getpwnam("munge");
    const std::filesystem::path m = c.dir_ / "munge";
    std::filesystem::create_directories(m);
    std::filesystem::create_directories(c.dir_ / "state");
    std::filesystem::create_directories(c.dir_ / "spool");
    {
      std::mt19937_64 rng(std::random_device{}());
      std::ofstream key(m / "munge.key", std::ios::binary);
      for (int i = 0; i < 128; ++i) {
        const uint64_t v = rng();
        key.write(reinterpret_cast<const char*>(&v), sizeof(v));
      }
    }
    chmod((m / "munge.key").c_str(), 0400);
    if (chown(m.c_str(), munge->pw_uid, munge->pw_gid) != 0 ||
        chown((m / "munge.key").c_str(), munge->pw_uid, munge->pw_gid) != 0) {
      *why = std::string("chown munge: ") + std::strerror(errno);
      return std::nullopt;
    }
    chmod(m.c_str(), 0711);  // its socket's directory too
    c.socket_ = (m / "munge.socket").string();
    c.munged_ =
        c.Spawn({"/usr/sbin/munged", "--foreground", "--key-file=" + (m / "munge.key").string(),
                 "--socket=" + c.socket_, "--pid-file=" + (m / "munged.pid").string(),
                 "--log-file=" + (m / "munged.log").string(),
                 "--seed-file=" + (m / "munged.seed").string()},
                (c.dir_ / "munged.out").string(), munge->pw_uid, munge->pw_gid);
    if (!c.WaitFor([&] { return access(c.socket_.c_str(), F_OK) == 0 || !Alive(c.munged_); }) ||
        !Alive(c.munged_)) {
      *why = "munged did not create its socket: " + c.Tail("munged.out");
      return std::nullopt;
    }
    const std::array<int, 2> ports = {FreePort(), FreePort()};
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    c.conf_ = (c.dir_ / "slurm.conf").string();
    {
      const std::string d = c.dir_.string();
      std::ofstream conf(c.conf_);
      conf << "ClusterName=headroomtest\n"
           << "SlurmctldHost=" << host << "(127.0.0.1)\n"
           << "SlurmctldPort=" << ports[0] << "\nSlurmdPort=" << ports[1] << "\n"
           << "SlurmUser=root\nSlurmdUser=root\n"
           << "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=" << c.socket_ << "\n"
           << "StateSaveLocation=" << d << "/state\nSlurmdSpoolDir=" << d << "/spool\n"
           << "SlurmctldPidFile=" << d << "/slurmctld.pid\nSlurmdPidFile=" << d << "/slurmd.pid\n"
           << "SlurmctldLogFile=" << d << "/slurmctld.log\nSlurmdLogFile=" << d << "/slurmd.log\n"
           << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
           << "JobAcctGatherType=jobacct_gather/none\nMpiDefault=none\n"
           << "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
           << "SchedulerType=sched/builtin\nReturnToService=2\n"
           << "NodeName=node1 NodeAddr=127.0.0.1 NodeHostname=" << host
           << " CPUs=" << std::max(1u, std::thread::hardware_concurrency()) << " State=UNKNOWN\n"
           << "PartitionName=test Nodes=node1 Default=YES MaxTime=INFINITE State=UP\n";
    }
    setenv("SLURM_CONF", c.conf_.c_str(), 1);
    c.slurmctld_ = c.Spawn({"/usr/sbin/slurmctld", "-D", "-f", c.conf_},
                           (c.dir_ / "slurmctld.out").string(), 0, 0);
    c.slurmd_ = c.Spawn({"/usr/sbin/slurmd", "-D", "-f", c.conf_, "-N", "node1"},
                        (c.dir_ / "slurmd.out").string(), 0, 0);
    const auto up = [&] { return Alive(c.slurmctld_) && Alive(c.slurmd_); };
    if (!c.WaitFor([&] {
          return !up() || c.Command("/usr/bin/sinfo -h -o %T 2>/dev/null").find("idle") == 0;
        }) ||
        !up()) {
      *why =
          "the node never came up idle: " + c.Tail("slurmctld.log") + " / " + c.Tail("slurmd.log");
      return std::nullopt;
    }
    return c;
  }

  SlurmCluster(SlurmCluster&& o) noexcept { *this = std::move(o); }
  SlurmCluster& operator=(SlurmCluster&& o) noexcept {
    std::swap(dir_, o.dir_);
    std::swap(conf_, o.conf_);
    std::swap(socket_, o.socket_);
    std::swap(munged_, o.munged_);
    std::swap(slurmctld_, o.slurmctld_);
    std::swap(slurmd_, o.slurmd_);
    return *this;
  }
  ~SlurmCluster() { Stop(); }

  const std::string& conf() const { return conf_; }
  const std::filesystem::path& dir() const { return dir_; }

  // A shell command's standard output (SLURM_CONF set), trailing newline removed.
  std::string Command(const std::string& line) const {
    std::string out;
    FILE* p = popen(line.c_str(), "r");
    if (p == nullptr) return out;
    char buf[512];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    pclose(p);
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return out;
  }

  // The job's state as squeue has it (RUNNING, SUSPENDED, PENDING...; "" once gone).
  std::string State(const std::string& job) const {
    return Command("/usr/bin/squeue -h -j " + job + " -o %T 2>/dev/null");
  }

  // Polls `done` every 50 ms for up to timeout_s.
  static bool WaitFor(const std::function<bool()>& done, double timeout_s = kReadyTimeoutS) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < until) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return done();
  }

  std::string Tail(const std::string& file) const {
    std::ifstream in(dir_ / file);
    std::string line, last;
    while (std::getline(in, line)) last = line;
    return last;
  }

 private:
  SlurmCluster() = default;

  // The child has not exited (reaped here if it has).
  static bool Alive(pid_t& pid) {
    if (pid <= 0) return false;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      pid = -1;
      return false;
    }
    return true;
  }

  static int FreePort() {
    auto port = headroom::FreeLoopbackPort();
    return port ? *port : -1;
  }

  pid_t Spawn(const std::vector<std::string>& argv, const std::string& out, uid_t uid, gid_t gid) {
    const pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
      }
      if (uid != 0) {
        if (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0) _exit(126);
        prctl(PR_SET_PDEATHSIG, SIGKILL);  // a change of credentials cleared it
      }
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    return pid;
  }

  void Stop() {
    for (pid_t* p : {&slurmd_, &slurmctld_, &munged_}) {
      if (*p <= 0) continue;
      kill(*p, SIGTERM);
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      int status = 0;
      while (waitpid(*p, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > until) {
          kill(*p, SIGKILL);
          waitpid(*p, &status, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      *p = -1;
    }
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
      dir_.clear();
    }
  }

  std::filesystem::path dir_;
  std::string conf_, socket_;
  pid_t munged_ = -1, slurmctld_ = -1, slurmd_ = -1;
};

}  // namespace headroom::slurm_test
