#include "telemetry/powercap.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace headroom::telemetry {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// Intel's usual range: 2^32 counts of 61.035 uJ.
constexpr uint64_t kRangeUj = 262143328850;

// A fake /sys/class/powercap under a temporary directory, removed afterwards. Zones are flat
// entries of the root, as in the class directory (where they are symlinks to directories).
class FakePowercap {
 public:
  FakePowercap() {
    std::string tmpl = (fs::temp_directory_path() / "powercap_test.XXXXXX").string();
    EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  ~FakePowercap() {
    std::error_code ec;
    fs::permissions(root_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(root_, ec);
  }
  const std::string& root() const { return root_; }
  std::string Path(const std::string& rel) const { return root_ + "/" + rel; }

  void Zone(const std::string& dir, const std::string& name, uint64_t energy_uj,
            uint64_t range_uj = kRangeUj) {
    fs::create_directories(Path(dir));
    Write(dir + "/name", name + "\n");
    Write(dir + "/max_energy_range_uj", std::to_string(range_uj) + "\n");
    Energy(dir, energy_uj);
  }
  void Energy(const std::string& dir, uint64_t energy_uj) {
    Write(dir + "/energy_uj", std::to_string(energy_uj) + "\n");
  }
  void Write(const std::string& rel, const std::string& content) {
    std::ofstream(Path(rel), std::ios::binary | std::ios::trunc) << content;
  }

 private:
  std::string root_;
};

// Two packages, each with subzones, and the control-type directory beside them: what a
// two-socket server's /sys/class/powercap lists.
void TwoSocketServer(FakePowercap& fake) {
  fs::create_directories(fake.Path("intel-rapl"));
  fake.Write("intel-rapl/enabled", "1\n");
  fake.Zone("intel-rapl:0", "package-0", 1000000);
  fake.Zone("intel-rapl:0:0", "dram", 5000000);
  fake.Zone("intel-rapl:1", "package-1", 2000000);
  fake.Zone("intel-rapl:1:0", "dram", 7000000);
  // Another family measuring the same packages: never added.
  fake.Zone("intel-rapl-mmio:0", "package-0", 1000000);
  fake.Zone("intel-rapl-tpmi:0", "package-0", 1000000);
}

TEST(Powercap, SumsThePackagesAndNotTheirSubzones) {
  FakePowercap fake;
  TwoSocketServer(fake);
  auto reader = PowercapReader::Open(fake.root());
  ASSERT_TRUE(reader.ok()) << reader.error().message();
  ASSERT_EQ(reader->zones().size(), 2u);
  EXPECT_EQ(reader->zones()[0].dir, fake.Path("intel-rapl:0"));
  EXPECT_EQ(reader->zones()[1].dir, fake.Path("intel-rapl:1"));
  EXPECT_EQ(reader->zones()[0].max_energy_range_uj, kRangeUj);
  EXPECT_EQ(reader->Describe(), "package-0+package-1");

  auto first = reader->Sample(10.0);
  ASSERT_TRUE(first.ok()) << first.error().message();
  EXPECT_FALSE(first->has_value());  // nothing to difference yet

  // In 2 s: package-0 +50 J, package-1 +30 J; the dram subzones and the other families move a lot.
  fake.Energy("intel-rapl:0", 1000000 + 50000000);
  fake.Energy("intel-rapl:1", 2000000 + 30000000);
  fake.Energy("intel-rapl:0:0", 999000000);
  fake.Energy("intel-rapl:1:0", 999000000);
  fake.Energy("intel-rapl-mmio:0", 999000000);
  fake.Energy("intel-rapl-tpmi:0", 999000000);
  auto second = reader->Sample(12.0);
  ASSERT_TRUE(second.ok()) << second.error().message();
  ASSERT_TRUE(second->has_value());
  EXPECT_DOUBLE_EQ(**second, (50.0 + 30.0) / 2.0);  // 40 W
}

TEST(Powercap, ZonesAreOrderedByIndexNotByName) {
  FakePowercap fake;
  for (int i : {10, 2, 1}) {
    fake.Zone("intel-rapl:" + std::to_string(i), "package-" + std::to_string(i), 0);
  }
  auto reader = PowercapReader::Open(fake.root());
  ASSERT_TRUE(reader.ok()) << reader.error().message();
  EXPECT_EQ(reader->Describe(), "package-1+package-2+package-10");
}

TEST(Powercap, PsysIsCountedAloneWhereItExists) {
  FakePowercap fake;
  fake.Zone("intel-rapl:0", "package-0", 0);
  fake.Zone("intel-rapl:0:0", "core", 0);
  fake.Zone("intel-rapl:1", "psys", 500000);
  auto reader = PowercapReader::Open(fake.root());
  ASSERT_TRUE(reader.ok()) << reader.error().message();
  ASSERT_EQ(reader->zones().size(), 1u);
  EXPECT_EQ(reader->Describe(), "psys");
  ASSERT_TRUE(reader->Sample(1.0).ok());
  fake.Energy("intel-rapl:0", 80000000);            // inside psys: not added
  fake.Energy("intel-rapl:1", 500000 + 120000000);  // +120 J in 4 s
  auto r = reader->Sample(5.0);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_DOUBLE_EQ(r->value(), 30.0);
}

TEST(Powercap, ACounterThatDecreasedWrappedOnce) {
  FakePowercap fake;
  fake.Zone("intel-rapl:0", "package-0", 900000, 1000000);  // range 1 J
  fake.Zone("intel-rapl:1", "package-1", 100, kRangeUj);
  auto reader = PowercapReader::Open(fake.root());
  ASSERT_TRUE(reader.ok()) << reader.error().message();
  ASSERT_TRUE(reader->Sample(0.0).ok());
  // package-0: 900000 -> range 1000000 -> 0 -> 100000: 100000 + 100000 uJ.
  // package-1: 100 -> 300100: 300000 uJ. Together 0.5 J in 0.5 s.
  fake.Energy("intel-rapl:0", 100000);
  fake.Energy("intel-rapl:1", 300100);
  auto r = reader->Sample(0.5);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_DOUBLE_EQ(r->value(), (100000.0 + 100000.0 + 300000.0) * 1e-6 / 0.5);  // 1 W
  // And on from the wrapped value, no wrap: 100000 -> 400000 in 1 s.
  fake.Energy("intel-rapl:0", 400000);
  r = reader->Sample(1.5);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->value(), 0.3);
}

TEST(Powercap, NoPowerWhenTheClockDidNotAdvance) {
  FakePowercap fake;
  fake.Zone("intel-rapl:0", "package-0", 0);
  auto reader = PowercapReader::Open(fake.root());
  ASSERT_TRUE(reader.ok());
  ASSERT_TRUE(reader->Sample(5.0).ok());
  fake.Energy("intel-rapl:0", 10000000);
  auto same = reader->Sample(5.0);
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(same->has_value());
  // The sample at 5 s is still the baseline: 20 J from 5 s to 7 s.
  fake.Energy("intel-rapl:0", 20000000);
  auto later = reader->Sample(7.0);
  ASSERT_TRUE(later.ok());
  EXPECT_DOUBLE_EQ(later->value(), 10.0);
}

TEST(Powercap, AMissingOrDirectoryEnergyFileIsAnErrorNamingIt) {
  {
    FakePowercap fake;
    fake.Zone("intel-rapl:0", "package-0", 0);
    fs::remove(fake.Path("intel-rapl:0/energy_uj"));
    auto reader = PowercapReader::Open(fake.root());
    ASSERT_FALSE(reader.ok());
    EXPECT_EQ(reader.error().kind(), ErrorKind::kIo);
    EXPECT_EQ(reader.error().message(), "powercap: cannot read " +
                                            fake.Path("intel-rapl:0/energy_uj") +
                                            ": No such file or directory");
  }
  {
    FakePowercap fake;
    fake.Zone("intel-rapl:0", "package-0", 0);
    fs::remove(fake.Path("intel-rapl:0/energy_uj"));
    fs::create_directory(fake.Path("intel-rapl:0/energy_uj"));
    auto reader = PowercapReader::Open(fake.root());
    ASSERT_FALSE(reader.ok());
    EXPECT_EQ(reader.error().message(),
              "powercap: cannot read " + fake.Path("intel-rapl:0/energy_uj") + ": Is a directory");
  }
  {
    // One of two packages unreadable: an error, not half the node.
    FakePowercap fake;
    fake.Zone("intel-rapl:0", "package-0", 0);
    fake.Zone("intel-rapl:1", "package-1", 0);
    fs::remove(fake.Path("intel-rapl:1/max_energy_range_uj"));
    auto reader = PowercapReader::Open(fake.root());
    ASSERT_FALSE(reader.ok());
    EXPECT_THAT(reader.error().message(), HasSubstr("intel-rapl:1/max_energy_range_uj"));
  }
}

TEST(Powercap, AnUnreadableEnergyFileSaysPermissionDenied) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads a mode-000 file (CI runs as root)";
  FakePowercap fake;
  fake.Zone("intel-rapl:0", "package-0", 0);
  ASSERT_EQ(chmod(fake.Path("intel-rapl:0/energy_uj").c_str(), 0), 0);
  auto reader = PowercapReader::Open(fake.root());
  ASSERT_FALSE(reader.ok());
  EXPECT_THAT(reader.error().message(), HasSubstr("energy_uj: Permission denied"));
}

TEST(Powercap, AFailedSampleKeepsThePreviousOneAndTheNextSpansTheGap) {
  FakePowercap fake;
  fake.Zone("intel-rapl:0", "package-0", 0);
  auto reader = PowercapReader::Open(fake.root());
  ASSERT_TRUE(reader.ok());
  ASSERT_TRUE(reader->Sample(1.0).ok());
  fs::remove(fake.Path("intel-rapl:0/energy_uj"));
  auto failed = reader->Sample(2.0);
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.error().message(), HasSubstr(fake.Path("intel-rapl:0/energy_uj")));
  fake.Energy("intel-rapl:0", 30000000);  // 30 J from 1 s to 4 s
  auto r = reader->Sample(4.0);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_DOUBLE_EQ(r->value(), 10.0);
}

TEST(Powercap, MalformedContentIsAnErrorNamingTheFileAndTheContent) {
  struct Case {
    std::string content;
    std::string shown;
  };
  const Case cases[] = {
      {"12ab\n", "'12ab\\n'"},
      {"", "''"},
      {"\n", "'\\n'"},
      {"-5\n", "'-5\\n'"},
      {"+5\n", "'+5\\n'"},
      {"1 2\n", "'1 2\\n'"},
      {"12\n34\n", "'12\\n34\\n'"},
      {"0x10\n", "'0x10\\n'"},
      {"1.5\n", "'1.5\\n'"},
      {"99999999999999999999999\n", "'99999999999999999999999\\n'"},  // above 2^64
      {std::string("7\0\n", 3), "'7\\x00\\n'"},
      {std::string(200, '9'), "'" + std::string(32, '9') + "...'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.shown);
    FakePowercap fake;
    fake.Zone("intel-rapl:0", "package-0", 0);
    fake.Write("intel-rapl:0/energy_uj", c.content);
    auto reader = PowercapReader::Open(fake.root());
    ASSERT_FALSE(reader.ok());
    EXPECT_EQ(reader.error().kind(), ErrorKind::kInput);
    const std::string& m = reader.error().message();
    EXPECT_THAT(m, HasSubstr(fake.Path("intel-rapl:0/energy_uj") + ": expected a whole number"));
    EXPECT_THAT(m, HasSubstr("got " + c.shown));
    EXPECT_THAT(m, Not(HasSubstr("\n")));
  }
  {
    // Malformed after Open: Sample says so.
    FakePowercap fake;
    fake.Zone("intel-rapl:0", "package-0", 0);
    auto reader = PowercapReader::Open(fake.root());
    ASSERT_TRUE(reader.ok());
    ASSERT_TRUE(reader->Sample(0.0).ok());
    fake.Write("intel-rapl:0/energy_uj", "garbage\n");
    auto r = reader->Sample(1.0);
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.error().message(), HasSubstr("energy_uj: expected a whole number of "
                                               "microjoules, got 'garbage\\n'"));
  }
  {
    FakePowercap fake;
    fake.Zone("intel-rapl:0", "package-0", 0);
    fake.Write("intel-rapl:0/max_energy_range_uj", "banana\n");
    auto reader = PowercapReader::Open(fake.root());
    ASSERT_FALSE(reader.ok());
    EXPECT_THAT(reader.error().message(), HasSubstr("max_energy_range_uj: expected"));
  }
  {
    FakePowercap fake;
    fake.Zone("intel-rapl:0", "package-0", 0, 0);
    auto reader = PowercapReader::Open(fake.root());
    ASSERT_FALSE(reader.ok());
    EXPECT_THAT(reader.error().message(),
                HasSubstr("max_energy_range_uj: expected a range above 0"));
  }
  {
    // A counter above its range cannot be differenced across a wrap.
    FakePowercap fake;
    fake.Zone("intel-rapl:0", "package-0", 0, 1000);
    auto reader = PowercapReader::Open(fake.root());
    ASSERT_TRUE(reader.ok());
    ASSERT_TRUE(reader->Sample(0.0).ok());
    fake.Energy("intel-rapl:0", 1001);
    auto r = reader->Sample(1.0);
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.error().message(),
                HasSubstr("energy_uj: 1001 is above max_energy_range_uj 1000"));
  }
}

TEST(Powercap, NoZoneToCountIsAnError) {
  {
    FakePowercap fake;
    auto reader = PowercapReader::Open(fake.root());
    ASSERT_FALSE(reader.ok());
    EXPECT_THAT(reader.error().message(), HasSubstr("no RAPL zone to count under " + fake.root()));
  }
  {
    // Only subzones, a top-level zone that is neither a package nor psys, the control-type
    // directory, a stray file with a zone's name, and a family not read.
    FakePowercap fake;
    fs::create_directories(fake.Path("intel-rapl"));
    fake.Zone("intel-rapl:0:0", "core", 0);
    fake.Zone("intel-rapl:1", "dram", 0);
    fake.Write("intel-rapl:2", "package-2\n");
    fake.Zone("intel-rapl-mmio:0", "package-0", 0);
    fake.Zone("intel-rapl:x", "package-0", 0);
    auto reader = PowercapReader::Open(fake.root());
    ASSERT_FALSE(reader.ok());
    EXPECT_THAT(reader.error().message(), HasSubstr("no RAPL zone to count"));
  }
  {
    auto reader = PowercapReader::Open("/nonexistent/powercap");
    ASSERT_FALSE(reader.ok());
    EXPECT_EQ(reader.error().message(),
              "powercap: cannot list /nonexistent/powercap: No such file or directory");
  }
}

TEST(Powercap, TheTpmiFamilyWhenThereIsNoMsrOne) {
  FakePowercap fake;
  fake.Zone("intel-rapl-tpmi:0", "package-0", 0);
  fake.Zone("intel-rapl-tpmi:1", "package-1", 0);
  fake.Zone("intel-rapl-tpmi:0:0", "dram", 0);
  auto reader = PowercapReader::Open(fake.root());
  ASSERT_TRUE(reader.ok()) << reader.error().message();
  ASSERT_EQ(reader->zones().size(), 2u);
  EXPECT_EQ(reader->zones()[1].dir, fake.Path("intel-rapl-tpmi:1"));
}

TEST(NodeOverhead, ConstantIsTheConfiguredValue) {
  auto overhead = NodeOverhead::Constant(350.0);
  EXPECT_EQ(overhead.CurrentW(0.0), 350.0);
  EXPECT_EQ(overhead.CurrentW(100.0), 350.0);
  EXPECT_EQ(overhead.from(), "--node-overhead-w");
  EXPECT_TRUE(overhead.TakeWarnings().empty());
}

TEST(NodeOverhead, PowercapKeepsTheLastGoodValueWhileReadsFailAndSaysSoOnce) {
  FakePowercap fake;
  fake.Zone("intel-rapl:0", "package-0", 0);
  fake.Zone("intel-rapl:1", "package-1", 0);
  auto reader = PowercapReader::Open(fake.root());
  ASSERT_TRUE(reader.ok());
  auto made = NodeOverhead::Powercap(std::move(*reader), 0.0);
  ASSERT_TRUE(made.ok()) << made.error().message();
  NodeOverhead& overhead = *made;
  EXPECT_EQ(overhead.from(), "powercap:package-0+package-1");
  EXPECT_EQ(overhead.CurrentW(0.0), 0.0);  // no interval measured yet

  fake.Energy("intel-rapl:0", 60000000);  // 60 J + 40 J in 1 s
  fake.Energy("intel-rapl:1", 40000000);
  EXPECT_DOUBLE_EQ(overhead.CurrentW(1.0), 100.0);
  EXPECT_TRUE(overhead.TakeWarnings().empty());

  fs::remove(fake.Path("intel-rapl:1/energy_uj"));
  EXPECT_DOUBLE_EQ(overhead.CurrentW(2.0), 100.0);
  EXPECT_DOUBLE_EQ(overhead.CurrentW(3.0), 100.0);
  auto warnings = overhead.TakeWarnings();
  ASSERT_EQ(warnings.size(), 1u);  // once, not every read
  EXPECT_THAT(warnings[0], HasSubstr(fake.Path("intel-rapl:1/energy_uj")));
  EXPECT_THAT(warnings[0], HasSubstr("last good value, 100.0 W"));

  // Back: 1 s -> 5 s, package-0 +100 J, package-1 +140 J: 60 W.
  fake.Energy("intel-rapl:0", 160000000);
  fake.Energy("intel-rapl:1", 180000000);
  EXPECT_DOUBLE_EQ(overhead.CurrentW(5.0), 60.0);
  warnings = overhead.TakeWarnings();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("after 2 failed reads"));
  // The clock did not advance: the latest value.
  EXPECT_DOUBLE_EQ(overhead.CurrentW(5.0), 60.0);
  EXPECT_TRUE(overhead.TakeWarnings().empty());
}

TEST(NodeOverhead, PowercapFailsAtStartWhenTheFirstSampleFails) {
  FakePowercap fake;
  fake.Zone("intel-rapl:0", "package-0", 0);
  auto reader = PowercapReader::Open(fake.root());
  ASSERT_TRUE(reader.ok());
  fake.Write("intel-rapl:0/energy_uj", "oops\n");
  auto made = NodeOverhead::Powercap(std::move(*reader), 0.0);
  ASSERT_FALSE(made.ok());
  EXPECT_THAT(made.error().message(), HasSubstr("got 'oops\\n'"));
}

}  // namespace
}  // namespace headroom::telemetry
