#include "common/paths.h"
#include "common/install_paths.h"
#include "common/read_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

namespace headroom {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class PathsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("headroom_paths_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "sub");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Touch(const std::string& name) {
    std::ofstream(dir_ / name) << "x";
    return (dir_ / name).string();
  }
  std::string P(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(PathsTest, ResolveFollowsLinksAndDanglingOnes) {
  const std::string file = Touch("a.csv");
  EXPECT_EQ(*ResolveOutputPath(file), file);          // not a link: itself
  EXPECT_EQ(*ResolveOutputPath(P("new")), P("new"));  // absent: itself
  fs::create_symlink(file, P("abs"));
  EXPECT_EQ(*ResolveOutputPath(P("abs")), file);
  fs::create_symlink("a.csv", P("rel"));  // relative to the link's directory
  EXPECT_EQ(*ResolveOutputPath(P("rel")), (dir_ / "a.csv").string());
  fs::create_symlink("../rel", P("sub/chain"));  // a chain of links
  EXPECT_EQ(fs::path(*ResolveOutputPath(P("sub/chain"))).lexically_normal(),
            (dir_ / "a.csv").lexically_normal());
  fs::create_symlink("sub/not-yet.csv", P("dangling"));
  EXPECT_EQ(*ResolveOutputPath(P("dangling")), (dir_ / "sub/not-yet.csv").string());
  fs::create_symlink("loop2", P("loop1"));
  fs::create_symlink("loop1", P("loop2"));
  auto loop = ResolveOutputPath(P("loop1"));
  ASSERT_FALSE(loop.ok());
  EXPECT_EQ(loop.error().kind(), ErrorKind::kIo);
  EXPECT_THAT(loop.error().message(), HasSubstr("too many levels of symbolic links"));
}

TEST_F(PathsTest, RefusesAnOutputThatIsAnInput) {
  const std::string trace = Touch("t.csv");
  auto same = RefuseOutputOverInput(trace, "--report", {{"TRACE", trace}});
  ASSERT_FALSE(same.ok());
  EXPECT_EQ(same.error().kind(), ErrorKind::kUsage);
  EXPECT_EQ(same.error().message(), "--report '" + trace + "' is also TRACE '" + trace +
                                        "': refusing to overwrite an input");
  // The same file by another name: a symlink, a hard link, a path with "..".
  fs::create_symlink(trace, P("link.html"));
  EXPECT_FALSE(RefuseOutputOverInput(P("link.html"), "--report", {{"TRACE", trace}}).ok());
  EXPECT_FALSE(RefuseOutputOverInput(trace, "--report", {{"TRACE", P("link.html")}}).ok());
  fs::create_hard_link(trace, P("hard.csv"));
  EXPECT_FALSE(RefuseOutputOverInput(P("hard.csv"), "--out", {{"--trace", trace}}).ok());
  EXPECT_FALSE(RefuseOutputOverInput(P("sub/../t.csv"), "--out", {{"--trace", trace}}).ok());
  // An output that does not exist yet, through a dangling link, onto an input's name.
  fs::create_symlink("sub/x.toml", P("out.toml"));
  EXPECT_FALSE(
      RefuseOutputOverInput(P("out.toml"), "--out", {{"--scenario", P("sub/x.toml")}}).ok());
  // Different files pass; empty paths are skipped; any of several inputs counts.
  const std::string other = Touch("other.csv");
  EXPECT_TRUE(RefuseOutputOverInput(P("r.html"), "--report", {{"TRACE", trace}}).ok());
  EXPECT_TRUE(RefuseOutputOverInput(other, "--report", {{"TRACE", trace}, {"--x", ""}}).ok());
  EXPECT_TRUE(RefuseOutputOverInput("", "--report", {{"TRACE", trace}}).ok());
  auto second = RefuseOutputOverInput(trace, "--out", {{"--a", other}, {"--b", trace}});
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.error().message(), HasSubstr("is also --b"));
}

// Issue 36, item 7: whole-file reads stop one byte past their bound, whatever the file is: a
// device that never ends (/dev/zero: a size check by seeking saw -1 and read until memory ran
// out), a directory, a file exactly at the bound and one byte over.
TEST_F(PathsTest, WholeFileReadsStopAtTheirBound) {
  std::ofstream(P("token")) << "s3cret\n";
  EXPECT_EQ(*ReadFileCapped(P("token"), 64), "s3cret\n");
  EXPECT_EQ(*ReadFileCapped(P("token"), 7), "s3cret\n");
  auto over = ReadFileCapped(P("token"), 6, "--token-file");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().message(), "--token-file " + P("token") + ": larger than 6 bytes");
  auto zero = ReadFileCapped("/dev/zero", kMaxSmallFileBytes, "--token-file");
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.error().message(), "--token-file /dev/zero: larger than 65536 bytes");
  auto dir = ReadFileCapped(P("sub"), 64);
  ASSERT_FALSE(dir.ok());
  EXPECT_THAT(dir.error().message(), HasSubstr(": cannot read: Is a directory"));
  auto missing = ReadFileCapped(P("missing"), 64, "--key-file");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.error().message(), HasSubstr("--key-file " + P("missing") + ": cannot open"));
  EXPECT_EQ(*ReadFileCapped("/dev/null", 64), "");
}

// Shipped data: the install prefix's share/headroom first, then the source tree; never ".".
TEST(DataDir, TheInstallPrefixFirstThenTheSourceTreeNeverTheCurrentDirectory) {
  std::set<std::string> dirs;
  const auto is_dir = [&dirs](const std::string& p) { return dirs.count(p) > 0; };
  EXPECT_EQ(ResolveDataDir("/usr/bin/headroom", "/src/headroom", "policies", is_dir), "");
  dirs.insert("/src/headroom/policies");
  EXPECT_EQ(ResolveDataDir("/usr/bin/headroom", "/src/headroom", "policies", is_dir),
            "/src/headroom/policies");
  dirs.insert("/usr/share/headroom/policies");
  EXPECT_EQ(ResolveDataDir("/usr/bin/headroom", "/src/headroom", "policies", is_dir),
            "/usr/share/headroom/policies");
  // No source tree (a package built elsewhere), no binary path: nothing, not "policies".
  dirs = {"policies", "./policies"};
  EXPECT_EQ(ResolveDataDir("", "", "policies", is_dir), "");
  EXPECT_EQ(ResolveDataDir("headroom", "", "policies", is_dir), "");
}

}  // namespace
}  // namespace headroom
