// A child process of a binary under test, its stderr in a file of its own temporary directory;
// SIGKILLed and reaped when the object goes, pass or fail. Waits poll waitpid (no sleeps as
// synchronisation: every wait is for an event, with a deadline).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

namespace headroom::test_support {

class Process {
 public:
  using Clock = std::chrono::steady_clock;

  Process(const std::string& binary, const std::vector<std::string>& args) {
    char dir[] = "/tmp/headroom-process-XXXXXX";
    if (mkdtemp(dir) != nullptr) dir_ = dir;
    stderr_path_ = dir_ + "/stderr";
    std::vector<std::string> all = {binary};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int err = open(stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      dup2(null, STDIN_FILENO);
      dup2(null, STDOUT_FILENO);
      dup2(err, STDERR_FILENO);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(err);
    close(null);
  }
  ~Process() {
    Kill(SIGKILL);
    Wait(std::chrono::seconds(10));
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  // The process's own temporary directory (removed with it): a place for its files.
  const std::string& dir() const { return dir_; }
  void Kill(int signal) {
    if (pid_ > 0 && !exited_) kill(pid_, signal);
  }
  // The exit status (waitpid's), or nullopt when still running at the deadline.
  std::optional<int> Wait(Clock::duration within) {
    const auto deadline = Clock::now() + within;
    while (pid_ > 0 && !exited_) {
      int status = 0;
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        status_ = status;
        break;
      }
      if (r < 0 && errno != EINTR) break;
      if (Clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return exited_ ? std::optional<int>(status_) : std::nullopt;
  }
  std::string Stderr() const {
    std::ifstream in(stderr_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // The port after `marker` (e.g. "listening on http://127.0.0.1:") on stderr; 0 when not
  // there by the deadline (or the process ended).
  int ListenPort(Clock::duration within,
                 std::string_view marker = "listening on http://127.0.0.1:") {
    const auto deadline = Clock::now() + within;
    while (Clock::now() < deadline) {
      const std::string text = Stderr();
      const size_t at = text.find(marker);
      if (at != std::string::npos) {
        const size_t digits = at + marker.size();
        size_t end = digits;
        while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
        if (end > digits && end < text.size()) return std::stoi(text.substr(digits, end - digits));
      }
      if (Wait(std::chrono::seconds(0))) return 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return 0;
  }

 private:
  std::string dir_;
  std::string stderr_path_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
};

}  // namespace headroom::test_support
