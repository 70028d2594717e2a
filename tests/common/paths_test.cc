#include "common/paths.h"
#include "common/install_paths.h"
#include "common/read_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

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

// Issue 53, item 8: secrets and configs are regular files. A FIFO with no writer is refused at
// once, before a byte is read (before: open() waited for a writer forever, and a coordinator
// blocked there ignored SIGTERM); so are a device, a directory and a socket. A regular file reads
// as ReadFileCapped reads it, bound included, through a symlink too.
TEST_F(PathsTest, SecretsAndConfigsMustBeRegularFiles) {
  std::ofstream(P("token")) << "s3cret\n";
  EXPECT_EQ(*ReadRegularFileCapped(P("token"), 64, "--token-file"), "s3cret\n");
  fs::create_symlink(P("token"), P("link"));
  EXPECT_EQ(*ReadRegularFileCapped(P("link"), 64), "s3cret\n");
  auto over = ReadRegularFileCapped(P("token"), 6, "--token-file");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().message(), "--token-file " + P("token") + ": larger than 6 bytes");
  ASSERT_EQ(::mkfifo(P("fifo").c_str(), 0600), 0);
  auto fifo = ReadRegularFileCapped(P("fifo"), 64, "--config");
  ASSERT_FALSE(fifo.ok());
  EXPECT_EQ(fifo.error().kind(), ErrorKind::kInput);
  EXPECT_EQ(fifo.error().message(), "--config " + P("fifo") + ": is a FIFO, not a regular file");
  auto zero = ReadRegularFileCapped("/dev/zero", 64, "--etcd-password-file");
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.error().message(),
            "--etcd-password-file /dev/zero: is a character device, not a regular file");
  auto dir = ReadRegularFileCapped(P("sub"), 64);
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.error().message(), P("sub") + ": is a directory, not a regular file");
  auto missing = ReadRegularFileCapped(P("missing"), 64, "--token-file");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().kind(), ErrorKind::kIo);
  EXPECT_THAT(missing.error().message(),
              HasSubstr("--token-file " + P("missing") + ": cannot open"));
}

TEST_F(PathsTest, ASecretReadableByOthersIsSaidSo) {
  std::ofstream(P("key")) << "k\n";
  fs::permissions(P("key"), fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_FALSE(ReadableByOthers(P("key")));
  fs::permissions(P("key"), fs::perms::group_read, fs::perm_options::add);
  EXPECT_TRUE(ReadableByOthers(P("key")));
  fs::permissions(P("key"), fs::perms::group_read, fs::perm_options::remove);
  fs::permissions(P("key"), fs::perms::others_read, fs::perm_options::add);
  EXPECT_TRUE(ReadableByOthers(P("key")));
  EXPECT_FALSE(ReadableByOthers(P("missing")));
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
