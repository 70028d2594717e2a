// A test of the headroom binary as a user runs it: a directory of its own per test (removed
// after, pass or fail), files written there, and a command line run with its exit status,
// stdout and stderr.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace headroom::test_support {

struct Outcome {
  int status;
  std::string out;
  std::string err;
};

class BinaryTest : public ::testing::Test {
 protected:
  // `prefix` names the directory under the system's temporary one, with the test's name.
  explicit BinaryTest(std::string prefix) : prefix_(std::move(prefix)) {}

  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           (prefix_ + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::filesystem::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  static std::string Slurp(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // Runs `line` (a shell command line) with stdout and stderr to files in the directory.
  Outcome Run(const std::string& line) {
    const std::filesystem::path out = dir_ / "stdout", err = dir_ / "stderr";
    const std::string cmd = line + " >" + out.string() + " 2>" + err.string();
    const int raw = std::system(cmd.c_str());
    return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, Slurp(out), Slurp(err)};
  }

  std::filesystem::path dir_;

 private:
  std::string prefix_;
};

}  // namespace headroom::test_support
