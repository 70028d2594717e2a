#include "common/atomic_file.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <csignal>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

namespace headroom {
namespace {

namespace fs = std::filesystem;

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("headroom_atomic_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  size_t FilesInDir() const {
    return static_cast<size_t>(
        std::distance(fs::directory_iterator(dir_), fs::directory_iterator()));
  }
  fs::path dir_;
};

TEST_F(AtomicFileTest, CommitWritesTheWholeFile) {
  const std::string path = (dir_ / "out.txt").string();
  ASSERT_TRUE(WriteFileAtomically(path, "hello\n").ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "hello\n");
  EXPECT_EQ(FilesInDir(), 1u);  // no temporary left behind
}

TEST_F(AtomicFileTest, AbandonedWriterLeavesNothing) {
  const std::string path = (dir_ / "out.txt").string();
  {
    auto writer = AtomicFileWriter::Open(path);
    ASSERT_TRUE(writer.ok());
    writer->Write("partial");
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(FilesInDir(), 0u);
}

TEST_F(AtomicFileTest, AbandonedWriterKeepsTheOldFile) {
  const std::string path = (dir_ / "out.txt").string();
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  {
    auto writer = AtomicFileWriter::Open(path);
    ASSERT_TRUE(writer.ok());
    writer->Write("new but unfinished");
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "old");
}

TEST_F(AtomicFileTest, MissingDirectoryIsAnIoError) {
  auto status = WriteFileAtomically((dir_ / "no" / "such" / "out.txt").string(), "x");
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().kind(), ErrorKind::kIo);
  EXPECT_NE(status.error().message().find("out.txt"), std::string::npos);
}

TEST_F(AtomicFileTest, WritesThroughASymlinkAndKeepsTheLink) {
  const fs::path target = dir_ / "target.csv";
  ASSERT_TRUE(WriteFileAtomically(target.string(), "old").ok());
  fs::permissions(target, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  fs::create_symlink("target.csv", dir_ / "link.csv");
  ASSERT_TRUE(WriteFileAtomically((dir_ / "link.csv").string(), "new").ok());
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.csv"));
  EXPECT_EQ(fs::read_symlink(dir_ / "link.csv"), "target.csv");
  std::ifstream in(target);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "new");
  EXPECT_EQ(fs::status(target).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  EXPECT_EQ(FilesInDir(), 2u);  // the link and its target, no temporary
  // A dangling link: the file is created where it points, in another directory.
  fs::create_directories(dir_ / "elsewhere");
  fs::create_symlink("elsewhere/new.csv", dir_ / "dangling.csv");
  auto writer = AtomicFileWriter::Open((dir_ / "dangling.csv").string());
  ASSERT_TRUE(writer.ok());
  EXPECT_EQ(fs::path(writer->temp_path()).parent_path(), dir_ / "elsewhere");  // beside it
  writer->Write("x");
  ASSERT_TRUE(writer->Commit().ok());
  EXPECT_TRUE(fs::is_symlink(dir_ / "dangling.csv"));
  EXPECT_TRUE(fs::is_regular_file(dir_ / "elsewhere" / "new.csv"));
}

// In a child: writers in progress, handlers installed, then SIGTERM. The child dies of the
// signal (not exit 0) and leaves no temporary file; a committed file stays.
// Issue 36, item 1: an output never replaces what is not a regular file. A directory, a FIFO, a
// link to a directory and a device other than /dev/null are refused with one line, and stay as
// they were; /dev/null is written in place and stays the device it is (as root, the rename
// replaced the system's /dev/null with a regular file).
TEST_F(AtomicFileTest, WhatIsNotARegularFileIsRefusedOrWrittenInPlace) {
  const std::string dir = (dir_ / "a-directory").string();
  fs::create_directories(dir);
  const std::string fifo = (dir_ / "a-fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string link = (dir_ / "a-link").string();
  fs::create_directory_symlink(dir, link);
  for (const auto& [path, what] : {std::pair{dir, "is a directory"}, std::pair{fifo, "is a FIFO"},
                                   std::pair{link, "is a directory"},
                                   std::pair{std::string("/dev/zero"), "is a character device"}}) {
    auto writer = AtomicFileWriter::Open(path);
    ASSERT_FALSE(writer.ok()) << path;
    EXPECT_EQ(writer.error().message(),
              fmt::format("{}: {}, not a regular file (outputs go to regular files, new paths, "
                          "/dev/null or /dev/stdout)",
                          path, what));
  }
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(FilesInDir(), 3u);  // no temporary file beside them

  struct stat before {};
  ASSERT_EQ(::stat("/dev/null", &before), 0);
  ASSERT_TRUE(WriteFileAtomically("/dev/null", "into the void\n").ok());
  struct stat after {};
  ASSERT_EQ(::stat("/dev/null", &after), 0);
  EXPECT_TRUE(S_ISCHR(after.st_mode));
  EXPECT_EQ(after.st_rdev, before.st_rdev);
  EXPECT_EQ(after.st_ino, before.st_ino);
}

TEST_F(AtomicFileTest, TemporaryFilesAreRemovedOnSigterm) {
  const std::string done = (dir_ / "done.txt").string();
  const std::string busy = (dir_ / "busy.txt").string();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    RemoveTempFilesOnSignals();
    if (!WriteFileAtomically(done, "done").ok()) _exit(3);
    auto a = AtomicFileWriter::Open(busy);
    auto b = AtomicFileWriter::Open((dir_ / "busy2.txt").string());
    if (!a.ok() || !b.ok()) _exit(4);
    a->Write("partial");
    raise(SIGTERM);
    _exit(5);  // not reached: the signal's default action ends the child
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_TRUE(fs::exists(done));
  EXPECT_FALSE(fs::exists(busy));
  EXPECT_EQ(FilesInDir(), 1u);  // done.txt only: both temporaries gone
}

// Without RemoveTempFilesOnSignals the registry installs nothing (the agent has its own
// handlers), and an ignored signal stays ignored even after it.
TEST_F(AtomicFileTest, TheRegistryInstallsNoHandlerUnlessAsked) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto w = AtomicFileWriter::Open((dir_ / "x.txt").string());
    struct sigaction current {};
    sigaction(SIGTERM, nullptr, &current);
    if (current.sa_handler != SIG_DFL) _exit(1);
    signal(SIGINT, SIG_IGN);
    RemoveTempFilesOnSignals();
    sigaction(SIGINT, nullptr, &current);
    if (current.sa_handler != SIG_IGN) _exit(2);
    sigaction(SIGTERM, nullptr, &current);
    if (current.sa_handler == SIG_DFL) _exit(3);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace headroom
