#include "common/atomic_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

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

}  // namespace
}  // namespace headroom
