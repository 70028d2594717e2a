#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "telemetry/nvml_source.h"
#include "telemetry/replay_source.h"

namespace headroom::telemetry {
namespace {

using ::testing::HasSubstr;

// The fake library and its scripting functions (the same handle NvmlSource opens).
struct Fake {
  Fake() {
    handle = dlopen(FAKE_NVML_PATH, RTLD_NOW | RTLD_LOCAL);
    EXPECT_NE(handle, nullptr) << dlerror();
    reset = reinterpret_cast<void (*)(int)>(dlsym(handle, "fake_nvml_reset"));
    status = reinterpret_cast<void (*)(const char*, int)>(dlsym(handle, "fake_nvml_status"));
    gpu = reinterpret_cast<void (*)(int, unsigned, unsigned, unsigned long long, unsigned, unsigned,
                                    unsigned)>(dlsym(handle, "fake_nvml_gpu"));
    limit_mw = reinterpret_cast<unsigned (*)(int)>(dlsym(handle, "fake_nvml_limit_mw"));
    initialised = reinterpret_cast<int (*)()>(dlsym(handle, "fake_nvml_initialised"));
  }
  ~Fake() { dlclose(handle); }
  void* handle;
  void (*reset)(int);
  void (*status)(const char*, int);
  void (*gpu)(int, unsigned, unsigned, unsigned long long, unsigned, unsigned, unsigned);
  unsigned (*limit_mw)(int);
  int (*initialised)();
};

TEST(Nvml, ReadsEveryFieldInWatts) {
  Fake fake;
  fake.reset(2);
  fake.gpu(0, 312500, 300000, 123456789, 400000, 1410, 97);
  fake.gpu(1, 88000, 90000, 5000, 350000, 1200, 3);
  auto s = NvmlSource::Open(FAKE_NVML_PATH);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ((*s)->gpus(), 2);
  auto r = (*s)->Read(1.5);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->t_s, 1.5);
  const GpuSample& g = r->gpus[0];
  EXPECT_DOUBLE_EQ(*g.power_w, 312.5);  // the instantaneous field, mW -> W
  EXPECT_FALSE(g.power_is_average);
  EXPECT_DOUBLE_EQ(*g.energy_j, 123456.789);
  EXPECT_DOUBLE_EQ(*g.power_limit_w, 400.0);
  EXPECT_DOUBLE_EQ(*g.sm_clock_mhz, 1410.0);
  EXPECT_DOUBLE_EQ(*g.util_pct, 97.0);
  EXPECT_DOUBLE_EQ(*r->gpus[1].power_w, 88.0);
  EXPECT_TRUE((*s)->TakeWarnings().empty());
  EXPECT_EQ(fake.initialised(), 1);
  s->reset();
  EXPECT_EQ(fake.initialised(), 0);  // nvmlShutdown on destruction
}

TEST(Nvml, WithoutTheInstantFieldFallsBackToTheAverageAndSaysSo) {
  Fake fake;
  fake.reset(1);
  fake.gpu(0, 0, 250000, 0, 400000, 1410, 50);
  fake.status("instant", 3);
  auto s = NvmlSource::Open(FAKE_NVML_PATH);
  ASSERT_TRUE(s.ok());
  for (int i = 0; i < 3; ++i) {
    auto r = (*s)->Read(i * 0.5);
    ASSERT_TRUE(r.ok());
    EXPECT_DOUBLE_EQ(*r->gpus[0].power_w, 250.0);
    EXPECT_TRUE(r->gpus[0].power_is_average);
  }
  const auto w = (*s)->TakeWarnings();
  ASSERT_EQ(w.size(), 2u);  // said once, not every read
  EXPECT_THAT(w[0], HasSubstr("GPU 0: instantaneous power not supported"));
  EXPECT_THAT(w[1], HasSubstr("averaged"));
}

TEST(Nvml, UnsupportedAndFailingFieldsAreEmptyWarnedOnceAndNotFatal) {
  Fake fake;
  fake.reset(1);
  fake.gpu(0, 300000, 300000, 1000, 400000, 1410, 50);
  fake.status("clock", 3);
  fake.status("energy", 999);
  auto s = NvmlSource::Open(FAKE_NVML_PATH);
  ASSERT_TRUE(s.ok());
  auto r1 = (*s)->Read(0.0);
  auto r2 = (*s)->Read(0.5);
  ASSERT_TRUE(r1.ok() && r2.ok());
  EXPECT_FALSE(r2->gpus[0].sm_clock_mhz.has_value());
  EXPECT_FALSE(r2->gpus[0].energy_j.has_value());
  EXPECT_DOUBLE_EQ(*r2->gpus[0].power_w, 300.0);
  const auto w = (*s)->TakeWarnings();
  ASSERT_EQ(w.size(), 2u);
  EXPECT_THAT(w[0], HasSubstr("GPU 0: total energy: Unknown Error (NVML error 999)"));
  EXPECT_THAT(w[1], HasSubstr("GPU 0: SM clock not supported; left empty"));
}

TEST(Nvml, NoPowerAtAllFailsTheReadWithTheReason) {
  Fake fake;
  fake.reset(1);
  fake.status("instant", 15);
  fake.status("power", 15);
  auto s = NvmlSource::Open(FAKE_NVML_PATH);
  ASSERT_TRUE(s.ok());
  auto r = (*s)->Read(0.0);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(),
              HasSubstr("GPU 0: cannot read power: GPU is lost (NVML error 15)"));
}

TEST(Nvml, OpenFailuresAreClear) {
  auto missing = NvmlSource::Open("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.error().message(),
              HasSubstr("nvml: cannot load /nonexistent/libnvidia-ml.so.1"));
  Fake fake;
  fake.reset(1);
  fake.status("init", 999);
  auto failed = NvmlSource::Open(FAKE_NVML_PATH);
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.error().message(), HasSubstr("nvmlInit failed: Unknown Error"));
  EXPECT_EQ(fake.initialised(), 0);
}

TEST(Nvml, ReadsThePowerLimitRange) {
  Fake fake;
  fake.reset(2);
  auto s = NvmlSource::Open(FAKE_NVML_PATH);
  ASSERT_TRUE(s.ok());
  auto r = (*s)->PowerLimitRangeW(1);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_DOUBLE_EQ(r->first, 100.0);  // the fake's A100-like 100-400 W
  EXPECT_DOUBLE_EQ(r->second, 400.0);
  EXPECT_FALSE((*s)->PowerLimitRangeW(2).ok());
  fake.status("limit", 999);
  auto failed = (*s)->PowerLimitRangeW(0);
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.error().message(), HasSubstr("cannot read the power limit range"));
}

TEST(Nvml, SetsPowerLimits) {
  Fake fake;
  fake.reset(2);
  auto s = NvmlSource::Open(FAKE_NVML_PATH);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->SetPowerLimitW(1, 275.0).ok());
  EXPECT_EQ(fake.limit_mw(1), 275000u);
  EXPECT_FALSE((*s)->SetPowerLimitW(2, 275.0).ok());
  fake.status("set_limit", 4);
  auto denied = (*s)->SetPowerLimitW(0, 300.0);
  ASSERT_FALSE(denied.ok());
  EXPECT_THAT(denied.error().message(), HasSubstr("cannot set the power limit to 300 W"));
}

TEST(Nvml, ReadsOnlyTheJobsGpusInTheOrderGiven) {
  Fake fake;
  fake.reset(8);
  for (int i = 0; i < 8; ++i) fake.gpu(i, 100000u + 1000u * i, 0, 0, 700000, 1980, 50);
  auto s = NvmlSource::Open(FAKE_NVML_PATH, {6, 2});
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ((*s)->gpus(), 2);
  EXPECT_EQ((*s)->indices(), (std::vector<int>{6, 2}));
  auto r = (*s)->Read(0.0);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->gpus.size(), 2u);
  EXPECT_DOUBLE_EQ(*r->gpus[0].power_w, 106.0);  // NVML GPU 6
  EXPECT_DOUBLE_EQ(*r->gpus[1].power_w, 102.0);  // NVML GPU 2
  // The guard's writes reach the GPU at that position; failures name the NVML index.
  ASSERT_TRUE((*s)->SetPowerLimitW(0, 500.0).ok());
  EXPECT_EQ(fake.limit_mw(6), 500000u);
  EXPECT_EQ(fake.limit_mw(0), 700000u);
  fake.status("set_limit", 4);
  auto denied = (*s)->SetPowerLimitW(1, 500.0);
  ASSERT_FALSE(denied.ok());
  EXPECT_THAT(denied.error().message(), HasSubstr("GPU 2: cannot set"));
  s->reset();

  auto missing = NvmlSource::Open(FAKE_NVML_PATH, {1, 8});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message(), "--gpus: GPU 8 is not on this node (NVML sees 8 GPUs: 0-7)");
  auto twice = NvmlSource::Open(FAKE_NVML_PATH, {3, 3});
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.error().message(), "--gpus: GPU 3 is listed twice");
}

TEST(Replay, LastSampleAtOrBeforeTheTime) {
  trace::CollectingSink::Series a, b;
  a.t_s = {10.0, 10.5, 11.0};
  a.power_w = {100.0, 200.0, 300.0};
  b.t_s = {10.2, 10.7};
  b.power_w = {50.0, 60.0};
  ReplaySource r({a, b});
  auto s = r.Read(0.0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s->gpus[0].power_w, 100.0);
  EXPECT_FALSE(s->gpus[1].power_w.has_value());  // GPU 1 starts at 10.2
  s = r.Read(0.6);
  EXPECT_EQ(*s->gpus[0].power_w, 200.0);
  EXPECT_EQ(*s->gpus[1].power_w, 50.0);
  s = r.Read(1.0);
  EXPECT_EQ(*s->gpus[0].power_w, 300.0);
  EXPECT_EQ(*s->gpus[1].power_w, 60.0);
  EXPECT_FALSE(r.Read(1.5).ok());                   // past the end
  EXPECT_EQ(*r.Read(0.1)->gpus[0].power_w, 100.0);  // time may go back
}

}  // namespace
}  // namespace headroom::telemetry
