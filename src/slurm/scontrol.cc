// The one file that talks to Slurm: `scontrol suspend|resume ID` as a child process.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "coord/layout.h"
#include "slurm/batch_scheduler.h"

namespace headroom::slurm {

namespace {

class Scontrol final : public BatchScheduler {
 public:
  Scontrol(std::string path, double timeout_s) : path_(std::move(path)), timeout_s_(timeout_s) {}

  Status Suspend(const std::string& job_id) override { return Run("suspend", job_id); }
  Status Resume(const std::string& job_id) override { return Run("resume", job_id); }
  std::string Describe() const override { return path_; }

 private:
  Status Run(const char* verb, const std::string& job_id) {
    if (!coord::IsSlurmJobId(job_id)) {
      return Error::Usage(fmt::format("slurm job '{}': not a job id", job_id));
    }
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) {
      return Error::Io(fmt::format("scontrol {} {}: pipe: {}", verb, job_id, strerror(errno)));
    }
    const pid_t pid = fork();
    if (pid < 0) {
      close(out[0]);
      close(out[1]);
      return Error::Io(fmt::format("scontrol {} {}: fork: {}", verb, job_id, strerror(errno)));
    }
    if (pid == 0) {
      dup2(out[1], STDOUT_FILENO);
      dup2(out[1], STDERR_FILENO);
      const int devnull = open("/dev/null", O_RDONLY);
      if (devnull >= 0) dup2(devnull, STDIN_FILENO);
      execlp(path_.c_str(), path_.c_str(), verb, job_id.c_str(), static_cast<char*>(nullptr));
      const std::string why = fmt::format("cannot run {}: {}\n", path_, strerror(errno));
      (void)!write(STDERR_FILENO, why.data(), why.size());
      _exit(127);
    }
    close(out[1]);
    // Its output until it closes it (exits), within the timeout.
    std::string text;
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    bool timed_out = false;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        timed_out = true;
        break;
      }
      pollfd p{out[0], POLLIN, 0};
      const int ready = poll(&p, 1, static_cast<int>(left.count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) {
        timed_out = ready == 0;
        break;
      }
      char buf[512];
      const ssize_t n = read(out[0], buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      if (text.size() < 4096) text.append(buf, static_cast<size_t>(n));
    }
    close(out[0]);
    if (timed_out) kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    const std::string first = text.substr(0, text.find('\n'));
    if (timed_out) {
      return Error::Io(
          fmt::format("scontrol {} {}: no answer within {} s", verb, job_id, timeout_s_));
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return Error::Io(fmt::format("scontrol {} {}: {}", verb, job_id,
                                   first.empty() ? std::string("failed") : first));
    }
    return OkStatus();
  }

  std::string path_;
  double timeout_s_;
};

}  // namespace

std::unique_ptr<BatchScheduler> MakeScontrol(std::string scontrol, double timeout_s) {
  return std::make_unique<Scontrol>(std::move(scontrol), timeout_s);
}

}  // namespace headroom::slurm
