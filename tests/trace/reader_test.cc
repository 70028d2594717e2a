#include "trace/reader.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "trickle_source.h"

namespace headroom::trace {
namespace {

using ::testing::HasSubstr;

// Reads `text` and keeps every sample, with the tokens and util columns when present.
struct Collected {
  Result<ReadSummary> summary = Error::Input("unset");
  CollectingSink sink;
};

// Reads `text` in place (views), and checks that reading it through a buffer in 7-byte reads
// gives the same outcome: samples, warnings, or error.
Collected Read(const std::string& text, ReadOptions options = {}) {
  Collected c;
  MemorySource source(text);
  c.summary = ReadTrace(source, "x.csv", options, c.sink);
  Collected buffered;
  TrickleSource chunks(text, 7);
  buffered.summary = ReadTrace(chunks, "x.csv", options, buffered.sink);
  EXPECT_EQ(c.summary.ok(), buffered.summary.ok()) << text;
  if (c.summary.ok() && buffered.summary.ok()) {
    EXPECT_EQ(c.summary->samples, buffered.summary->samples);
    EXPECT_EQ(c.summary->warnings, buffered.summary->warnings);
    EXPECT_EQ(c.summary->schema.gpu_ids, buffered.summary->schema.gpu_ids);
    const auto& a = c.sink.series();
    const auto& b = buffered.sink.series();
    EXPECT_EQ(a.size(), b.size());
    for (size_t g = 0; g < std::min(a.size(), b.size()); ++g) {
      EXPECT_EQ(a[g].t_s, b[g].t_s);
      EXPECT_EQ(a[g].power_w, b[g].power_w);
    }
  } else if (!c.summary.ok() && !buffered.summary.ok()) {
    EXPECT_EQ(c.summary.error().message(), buffered.summary.error().message());
  }
  return c;
}

std::string ErrorOf(const std::string& text, ReadOptions options = {}) {
  auto c = Read(text, options);
  EXPECT_FALSE(c.summary.ok()) << text;
  return c.summary.ok() ? "" : c.summary.error().message();
}

TEST(LongFormat, ReadsSamplesPerGpu) {
  auto c = Read("t_s,gpu,power_w\n0,0,100\n0.5,1,200\n1,0,150.25\n");
  ASSERT_TRUE(c.summary.ok()) << c.summary.error().message();
  EXPECT_EQ(c.summary->rows, 3u);
  EXPECT_EQ(c.summary->samples, 3u);
  EXPECT_EQ(c.summary->schema.format, TraceFormat::kLong);
  EXPECT_EQ(c.summary->schema.gpu_ids, (std::vector<std::string>{"0", "1"}));
  const auto& s = c.sink.series();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].t_s, (std::vector<double>{0.0, 1.0}));
  EXPECT_EQ(s[0].power_w, (std::vector<double>{100.0, 150.25}));
  EXPECT_EQ(s[1].t_s, (std::vector<double>{0.5}));
  EXPECT_EQ(s[1].power_w, (std::vector<double>{200.0}));
}

TEST(LongFormat, ColumnsInAnyOrderWithOptionalFields) {
  auto c = Read(
      "phase,power_w,tokens,gpu,t_s,unknown\n"
      "rollout,100,5,a,0,x\n"
      "\"train\",120,,a,1,y\n"
      ",130,7,b,1,z\n");
  ASSERT_TRUE(c.summary.ok()) << c.summary.error().message();
  const auto& schema = c.summary->schema;
  EXPECT_TRUE(schema.has_phase);
  EXPECT_TRUE(schema.Has(Field::kTokens));
  EXPECT_FALSE(schema.Has(Field::kStep));
  EXPECT_EQ(schema.gpu_ids, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(schema.phase_names, (std::vector<std::string>{"rollout", "train"}));
  const auto& s = c.sink.series();
  EXPECT_EQ(s[0].tokens, (std::vector<double>{5.0, 0.0}));  // empty tokens count as none
  EXPECT_EQ(s[1].tokens, (std::vector<double>{7.0}));
}

TEST(LongFormat, ToleratesCrlfBomBlankLinesAndBlanks) {
  auto c = Read("\xEF\xBB\xBFt_s,gpu,power_w\r\n0, 0 ,  100 \r\n\r\n1,0,\"110\"\r\n");
  ASSERT_TRUE(c.summary.ok()) << c.summary.error().message();
  EXPECT_EQ(c.sink.series()[0].power_w, (std::vector<double>{100.0, 110.0}));
}

TEST(LongFormat, ErrorsNameFileLineColumnAndField) {
  const std::string header = "t_s,gpu,power_w\n";
  EXPECT_THAT(ErrorOf(header + "0,0,abc\n"),
              HasSubstr("x.csv:2:3: column 'power_w': unparsable number 'abc'"));
  EXPECT_THAT(ErrorOf(header + "0,0,1\n1,0,12x\n"), HasSubstr("x.csv:3:3: column 'power_w'"));
  EXPECT_THAT(ErrorOf(header + "0,0,nan\n"),
              HasSubstr("x.csv:2:3: column 'power_w': not a finite number 'nan'"));
  EXPECT_THAT(ErrorOf(header + "inf,0,5\n"),
              HasSubstr("x.csv:2:1: column 't_s': not a finite number"));
  EXPECT_THAT(ErrorOf(header + "0,0,-5\n"),
              HasSubstr("x.csv:2:3: column 'power_w': negative power -5 W"));
  EXPECT_THAT(ErrorOf(header + "1,0,5\n0.5,0,5\n"),
              HasSubstr("x.csv:3:1: column 't_s': time goes backwards for gpu 0: 0.5 s after 1 s"));
  EXPECT_THAT(ErrorOf(header + "0,,5\n"), HasSubstr("x.csv:2:2: column 'gpu': missing value"));
  EXPECT_THAT(ErrorOf(header + "0,0,\n"), HasSubstr("x.csv:2:3: column 'power_w': missing value"));
  EXPECT_THAT(ErrorOf(header + "0,0\n"), HasSubstr("x.csv:2: row has 2 fields, the header has 3"));
  EXPECT_THAT(ErrorOf(header + "0,0,1,2\n"),
              HasSubstr("x.csv:2: row has more fields than the header's 3"));
  EXPECT_THAT(ErrorOf("t_s,gpu,tokens,power_w\n0,0,-1,5\n"),
              HasSubstr("x.csv:2:3: column 'tokens': negative value -1"));
}

TEST(LongFormat, OtherLayoutsReportTheSameErrors) {
  // The minimal layout has its own loop; a fourth column takes the general one.
  const std::string header = "t_s,gpu,power_w,step\n";
  EXPECT_THAT(ErrorOf(header + "0,0,abc,1\n"),
              HasSubstr("x.csv:2:3: column 'power_w': unparsable number 'abc'"));
  EXPECT_THAT(ErrorOf(header + "1,0,5,1\n0.5,0,5,1\n"),
              HasSubstr("x.csv:3:1: column 't_s': time goes backwards for gpu 0"));
  EXPECT_THAT(ErrorOf(header + "0,0,-1,1\n"),
              HasSubstr("x.csv:2:3: column 'power_w': negative power"));
}

TEST(LongFormat, RepeatedTimestampTextIsReusedOnlyWhenIdentical) {
  // Rows of one poll share t_s; near-identical texts (a longer number, another length, a
  // 17-character timestamp) must still be parsed afresh.
  const std::string rows =
      "12.5,0,1\n12.5,1,2\n12.55,0,3\n12.5,2,4\n112.5,1,5\n"
      "1234567.123456789,0,6\n1234567.123456789,1,7\n1234567.123456780,2,8\n";
  for (const std::string header : {"t_s,gpu,power_w\n", "t_s,gpu,power_w,step\n"}) {
    std::string text = header;
    if (header.find("step") != std::string::npos) {
      // Same rows with a fourth column: the general loop.
      std::string extended;
      size_t start = 0;
      for (size_t nl = rows.find('\n'); nl != std::string::npos; nl = rows.find('\n', start)) {
        extended += rows.substr(start, nl - start) + ",1\n";
        start = nl + 1;
      }
      text += extended;
    } else {
      text += rows;
    }
    auto c = Read(text);
    ASSERT_TRUE(c.summary.ok()) << c.summary.error().message();
    const auto& s = c.sink.series();
    EXPECT_EQ(s[0].t_s, (std::vector<double>{12.5, 12.55, 1234567.123456789}));
    EXPECT_EQ(s[1].t_s, (std::vector<double>{12.5, 112.5, 1234567.123456789}));
    EXPECT_EQ(s[2].t_s, (std::vector<double>{12.5, 1234567.12345678}));
  }
}

// Power per GPU is in [0, kMaxPowerW]: 1e308 W is an error, not a reading. Every layout and
// both paths (the minimal layout's fast path, the checked path) give the same error.
TEST(PowerBound, AboveTenKilowattsIsAnErrorInEveryFormat) {
  EXPECT_EQ(ErrorOf("t_s,gpu,power_w\n0,0,100\n1,0,1e308\n"),
            "x.csv:3:3: column 'power_w': power 1e+308 W is above 10000 W, the bound on one "
            "GPU's power");
  EXPECT_EQ(ErrorOf("t_s,gpu,power_w\n0,0,100\n1,0,10000.01\n"),
            "x.csv:3:3: column 'power_w': power 10000.01 W is above 10000 W, the bound on one "
            "GPU's power");
  EXPECT_THAT(ErrorOf("t_s,gpu,power_w\n0,0,100\n1,0,99999\n"), HasSubstr("x.csv:3:3:"));
  EXPECT_THAT(ErrorOf("t_s,gpu,power_w\n0,0,100000000000000\n"), HasSubstr("above 10000 W"));
  EXPECT_THAT(ErrorOf("gpu,t_s,power_w,phase\n0,0,1e5,x\n"),
              HasSubstr("x.csv:2:3: column 'power_w': power 100000 W is above"));
  EXPECT_THAT(ErrorOf("t_s,p0_w,p1_w\n0,1,20000\n"),
              HasSubstr("x.csv:2:3: column 'p1_w': power 20000 W is above"));
  EXPECT_THAT(ErrorOf("timestamp, index, power.draw [W]\n2025/07/27 00:47:09.120, 0, 12000 W\n"),
              HasSubstr("x.csv:2:3: column 'power.draw [W]': power 12000 W is above"));
  // The bound itself is a reading, in every spelling of it.
  for (const char* w : {"10000", "10000.0", "10000.00", "10000.000000", "1e4", "9999.99"}) {
    auto c = Read(std::string("t_s,gpu,power_w\n0,0,") + w + "\n");
    ASSERT_TRUE(c.summary.ok()) << w << ": " << c.summary.error().message();
    EXPECT_LE(c.sink.series()[0].power_w[0], 10000.0);
  }
}

// No field holds a control byte (tab is a blank); the error names file, line and column, with
// the byte escaped. A NUL in a gpu cell used to make a GPU named "0\0".
TEST(ControlBytes, AreRefusedInEveryField) {
  const std::string nul(1, '\0');
  EXPECT_EQ(ErrorOf("t_s,gpu,power_w\n0,0" + nul + ",100\n"),
            "x.csv:2:2: column 'gpu': control byte 0x00 in the value");
  EXPECT_EQ(ErrorOf("t_s,gpu,power_w\n0,0,100\n1,a" + nul + "b,100\n"),
            "x.csv:3:2: column 'gpu': control byte 0x00 in the value");
  EXPECT_EQ(ErrorOf("t_s,gpu,power_w\n0,0,1" + nul + "\n"),
            "x.csv:2:3: column 'power_w': control byte 0x00 in the value");
  EXPECT_EQ(ErrorOf("t_s,gpu,power_w\n0" + nul + ",0,1\n"),
            "x.csv:2:1: column 't_s': control byte 0x00 in the value");
  EXPECT_EQ(ErrorOf("t_s,gpu,power_w,phase\n0,0,1,roll\x01out\n"),
            "x.csv:2:4: column 'phase': control byte 0x01 in the value");
  EXPECT_EQ(ErrorOf("t_s,gpu,power_w,note\n0,0,1,a\x1b[2J\n"),
            "x.csv:2:4: column 'note': control byte 0x1b in the value");  // ignored, still text
  EXPECT_EQ(ErrorOf("t_s,gpu,power_w\n0,\"a\rb\",1\n"),
            "x.csv:2:2: column 'gpu': control byte 0x0d in the value");
  EXPECT_EQ(ErrorOf("t_s,gpu,power_w\n0,0,1\x7f\n"),
            "x.csv:2:3: column 'power_w': control byte 0x7f in the value");
  EXPECT_EQ(ErrorOf("t_s,gpu,power_w\n0,0,1\r" + nul + "\n"),
            "x.csv:2: control byte 0x00 after the last field");
  EXPECT_EQ(ErrorOf("t_s,g\x01pu,power_w\n0,0,1\n"), "x.csv:1:2: control byte 0x01 in the header");
  EXPECT_EQ(ErrorOf("t_s,p0_w,mem0_mib\n0,1,5\x02\n"),
            "x.csv:2:3: column 'mem0_mib': control byte 0x02 in the value");
  EXPECT_THAT(
      ErrorOf("timestamp, index, power.draw [W]\n2025/07/27 00:47:09.120" + nul + ", 0, 12 W\n"),
      HasSubstr("x.csv:2:1: column 'timestamp': control byte 0x00 in the value"));
  // Tabs are blanks, and bytes above 0x7f are text (UTF-8 names).
  auto c = Read("t_s,gpu,power_w\n0,\tgpu\xc3\xa9,\t100\t\n");
  ASSERT_TRUE(c.summary.ok()) << c.summary.error().message();
  EXPECT_EQ(c.summary->schema.gpu_ids, (std::vector<std::string>{"gpu\xc3\xa9"}));
}

TEST(HeaderErrors, MissingColumnsEmptyFileUnknownFormatDuplicates) {
  EXPECT_THAT(ErrorOf(""), HasSubstr("x.csv: empty file"));
  EXPECT_THAT(ErrorOf("a,b,c\n1,2,3\n"), HasSubstr("x.csv:1: unknown trace format"));
  ReadOptions long_format;
  long_format.format = TraceFormat::kLong;
  EXPECT_THAT(ErrorOf("t_s,gpu\n0,0\n", long_format),
              HasSubstr("x.csv:1: missing column 'power_w'"));
  EXPECT_THAT(ErrorOf("t_s,gpu,power_w,gpu\n"),
              HasSubstr("x.csv:1:4: column 'gpu': duplicate column name"));
}

TEST(Reader, HeaderOnlyIsZeroSamples) {
  auto c = Read("t_s,gpu,power_w");
  ASSERT_TRUE(c.summary.ok());
  EXPECT_EQ(c.summary->samples, 0u);
}

TEST(Reader, AbsurdlyLongLineIsAnError) {
  ReadOptions options;
  options.max_line_bytes = 64;
  const std::string long_line(200, '1');
  EXPECT_THAT(ErrorOf("t_s,gpu,power_w\n0,0," + long_line + "\n", options),
              HasSubstr("x.csv:2: line longer than 64 bytes"));
  EXPECT_THAT(ErrorOf("t_s,gpu,power_w\n0,0," + long_line, options),
              HasSubstr("line longer than 64 bytes"));
  EXPECT_THAT(ErrorOf(std::string(100, 'a') + "\n", options), HasSubstr("x.csv:1: line longer"));
}

TEST(Reader, TruncatedLastLineIsAWarningAndSkipped) {
  auto c = Read("t_s,gpu,power_w\n0,0,100\n1,0");
  ASSERT_TRUE(c.summary.ok());
  EXPECT_EQ(c.summary->samples, 1u);
  ASSERT_EQ(c.summary->warnings.size(), 1u);
  EXPECT_THAT(c.summary->warnings[0], HasSubstr("x.csv:3"));
  EXPECT_THAT(c.summary->warnings[0], HasSubstr("no newline at the end"));
}

TEST(Reader, CompleteLastLineWithoutNewlineIsKept) {
  auto c = Read("t_s,gpu,power_w\n0,0,100\n1,0,200");
  ASSERT_TRUE(c.summary.ok());
  EXPECT_EQ(c.summary->samples, 2u);
  EXPECT_TRUE(c.summary->warnings.empty());
}

TEST(Reader, LinesSplitAcrossReadsAndChunks) {
  // 300,000 rows (~4 MB, several 1 MiB chunks), 3 GPUs; power = row index mod 10,000 W.
  std::string text = "t_s,gpu,power_w\n";
  constexpr int kRows = 300000;
  double expected_sum = 0.0;
  for (int i = 0; i < kRows; ++i) {
    text += std::to_string(i / 3) + "," + std::to_string(i % 3) + "," + std::to_string(i % 10000) +
            "\n";
    expected_sum += i % 10000;
  }
  for (size_t step : {size_t{7}, size_t{1} << 30}) {
    TrickleSource source(text, step);
    CollectingSink sink;
    auto summary = ReadTrace(source, "x.csv", {}, sink);
    ASSERT_TRUE(summary.ok()) << summary.error().message();
    EXPECT_EQ(summary->samples, static_cast<uint64_t>(kRows));
    double sum = 0.0;
    for (const auto& s : sink.series()) {
      for (double p : s.power_w) sum += p;
    }
    EXPECT_EQ(sum, expected_sum);
    EXPECT_EQ(sink.series()[2].t_s.back(), (kRows - 1) / 3);
  }
}

TEST(WideFormat, OneSamplePerGpuColumn) {
  auto c = Read("t_s,p0_w,p1_w,node_gpu_w,util0_pct,util1_pct\n0,10,20,30,5,6\n1,11,,31,7,\n");
  ASSERT_TRUE(c.summary.ok()) << c.summary.error().message();
  EXPECT_EQ(c.summary->schema.format, TraceFormat::kWide);
  EXPECT_EQ(c.summary->rows, 2u);
  EXPECT_EQ(c.summary->samples, 3u);  // the empty p1_w cell is no sample
  EXPECT_TRUE(c.summary->schema.Has(Field::kUtilPct));
  const auto& s = c.sink.series();
  EXPECT_EQ(s[0].t_s, (std::vector<double>{0.0, 1.0}));
  EXPECT_EQ(s[0].power_w, (std::vector<double>{10.0, 11.0}));
  EXPECT_EQ(s[1].power_w, (std::vector<double>{20.0}));
}

TEST(WideFormat, Errors) {
  ReadOptions wide;
  wide.format = TraceFormat::kWide;
  EXPECT_THAT(ErrorOf("p0_w,p1_w\n1,2\n", wide), HasSubstr("missing column 't_s'"));
  EXPECT_THAT(ErrorOf("t_s,x\n1,2\n", wide), HasSubstr("no power columns"));
  EXPECT_THAT(ErrorOf("t_s,p0_w,p1_w\n0,1,-2\n"),
              HasSubstr("x.csv:2:3: column 'p1_w': negative power"));
  EXPECT_THAT(ErrorOf("t_s,p0_w\n2,1\n1,1\n"),
              HasSubstr("x.csv:3:1: column 't_s': time goes backwards"));
}

TEST(AllFormats, RefuseTimesBeyondTheBound) {
  // Epoch milliseconds in t_s (1.7e12) are a unit error; 1e11 s itself passes. The fast path
  // of the minimal long layout (plain decimals), its checked path (an exponent), the general
  // layout and the wide format all refuse it with the same line. Found by the fuzzer: a time of
  // 4e46 s overflowed the analyzer's window index.
  EXPECT_THAT(ErrorOf("t_s,gpu,power_w\n0,0,5\n1700000000000,0,5\n"),
              HasSubstr("x.csv:3:1: column 't_s': time 1700000000000 s is beyond 100000000000 s"));
  EXPECT_THAT(ErrorOf("t_s,gpu,power_w\n4e46,0,5\n"),
              HasSubstr("x.csv:2:1: column 't_s': time 4e+46 s is beyond 100000000000 s"));
  EXPECT_THAT(ErrorOf("t_s,gpu,power_w\n-2e11,0,5\n"),
              HasSubstr("x.csv:2:1: column 't_s': time -200000000000 s is beyond "
                        "-100000000000 s"));
  EXPECT_THAT(ErrorOf("t_s,gpu,power_w,step\n2e11,0,5,1\n"),
              HasSubstr("x.csv:2:1: column 't_s': time 200000000000 s is beyond"));
  EXPECT_THAT(ErrorOf("t_s,p0_w\n0,1\n2e11,1\n"),
              HasSubstr("x.csv:3:1: column 't_s': time 200000000000 s is beyond"));
  auto c = Read("t_s,gpu,power_w\n0,0,5\n100000000000,0,5\n");
  ASSERT_TRUE(c.summary.ok()) << c.summary.error().message();
  EXPECT_EQ(c.sink.series()[0].t_s, (std::vector<double>{0.0, 1e11}));
}

TEST(AllFormats, AGpuBeyondMaxGpusIsAnErrorNamingTheOption) {
  // Before: a file of one row per GPU id grew memory ~100 KB per id until it aborted.
  ReadOptions three;
  three.max_gpus = 3;
  const std::string bound =
      "more than 3 GPUs in the trace, the bound on GPUs per trace "
      "(--max-gpus raises it)";
  // The fast path of the minimal layout, then the general layout (named GPUs, a tokens column).
  EXPECT_THAT(ErrorOf("t_s,gpu,power_w\n0,0,1\n0,1,1\n0,2,1\n1,0,1\n1,7,1\n", three),
              HasSubstr("x.csv:6:2: column 'gpu': " + bound));
  EXPECT_THAT(ErrorOf("t_s,power_w,gpu,tokens\n0,1,a,0\n0,1,b,0\n0,1,c,0\n0,1,d,0\n", three),
              HasSubstr("x.csv:5:3: column 'gpu': " + bound));
  EXPECT_THAT(ErrorOf("t_s,p0_w,p1_w,p2_w,p3_w\n0,1,1,1,1\n", three),
              HasSubstr("4 power columns: " + bound));
  const std::string smi = "timestamp, index, power.draw [W]\n";
  std::string polls = smi;
  for (int g = 0; g < 4; ++g) polls += fmt::format("2025/07/27 00:47:09.120, {}, 5 W\n", g);
  EXPECT_THAT(ErrorOf(polls, three), HasSubstr("x.csv:5:2: column 'index': " + bound));
  // At the bound, read.
  auto c = Read("t_s,gpu,power_w\n0,0,1\n0,1,1\n0,2,1\n1,2,1\n", three);
  ASSERT_TRUE(c.summary.ok()) << c.summary.error().message();
  EXPECT_EQ(c.summary->schema.gpu_ids.size(), 3u);
  EXPECT_EQ(ReadOptions{}.max_gpus, 4096u);
}

TEST(NvidiaSmiFormat, WithIndexColumn) {
  auto c = Read(
      "timestamp, index, power.draw [W], utilization.gpu [%]\n"
      "2025/07/27 00:47:09.120, 0, 69.85 W, 0 %\n"
      "2025/07/27 00:47:09.123, 1, 72.83 W, 3 %\n"
      "2025/07/27 00:47:09.220, 0, 70.00 W, [N/A]\n");
  ASSERT_TRUE(c.summary.ok()) << c.summary.error().message();
  EXPECT_EQ(c.summary->schema.format, TraceFormat::kNvidiaSmi);
  const auto& s = c.sink.series();
  ASSERT_EQ(s.size(), 2u);
  // t_s counts from the first row's timestamp: (220 - 120) ms and (123 - 120) ms.
  EXPECT_EQ(s[0].t_s, (std::vector<double>{0.0, 0.1}));
  EXPECT_EQ(s[0].power_w, (std::vector<double>{69.85, 70.0}));
  EXPECT_EQ(s[1].t_s, (std::vector<double>{0.003}));
}

TEST(NvidiaSmiFormat, WithoutIndexRowsOfAPollAreConsecutive) {
  const std::string log =
      "timestamp, power.draw [W], utilization.gpu [%], memory.used [MiB]\n"
      "2025/07/27 23:59:59.950, 10.5 W, 0 %, 135 MiB\n"
      "2025/07/27 23:59:59.952, 20.5 W, 0 %, 17 MiB\n"
      "2025/07/28 00:00:00.050, 11.5 W, 0 %, 135 MiB\n"
      "2025/07/28 00:00:00.052, 21.5 W, 0 %, 17 MiB\n";
  EXPECT_THAT(ErrorOf(log), HasSubstr("give --gpus N"));
  EXPECT_EQ(Read(log).summary.error().kind(), ErrorKind::kUsage);
  ReadOptions two;
  two.gpus_per_poll = 2;
  auto c = Read(log, two);
  ASSERT_TRUE(c.summary.ok()) << c.summary.error().message();
  const auto& s = c.sink.series();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].power_w, (std::vector<double>{10.5, 11.5}));
  EXPECT_EQ(s[1].power_w, (std::vector<double>{20.5, 21.5}));
  // Across midnight: 23:59:59.950 -> 00:00:00.050 is 0.1 s.
  EXPECT_EQ(s[0].t_s, (std::vector<double>{0.0, 0.1}));
  EXPECT_EQ(s[1].t_s, (std::vector<double>{0.002, 0.102}));
}

TEST(NvidiaSmiFormat, Errors) {
  const std::string header = "timestamp, index, power.draw [W]\n";
  EXPECT_THAT(ErrorOf(header + "2025/13/27 00:47:09.120, 0, 5 W\n"),
              HasSubstr("x.csv:2:1: column 'timestamp': bad timestamp"));
  // Past what int64 nanoseconds hold (year 2262; the fuzzer's find): refused, not overflowed.
  EXPECT_THAT(ErrorOf(header + "9525/07/27 00:47:09.120, 0, 5 W\n"),
              HasSubstr("x.csv:2:1: column 'timestamp': bad timestamp"));
  EXPECT_THAT(ErrorOf(header + "0025/07/27 00:47:09.120, 0, 5 W\n"),
              HasSubstr("x.csv:2:1: column 'timestamp': bad timestamp"));
  EXPECT_THAT(ErrorOf(header + "2025/07/27 00:47:09.120, 0, [N/A]\n"),
              HasSubstr("x.csv:2:3: column 'power.draw [W]': power not available"));
  EXPECT_THAT(
      ErrorOf(header + "2025/07/27 00:47:09.120, 0, 5 W\n2025/07/27 00:47:09.020, 0, 5 W\n"),
      HasSubstr("x.csv:3:1: column 'timestamp': time goes backwards for gpu 0"));
  EXPECT_THAT(ErrorOf(header + "2025/07/27 00:47:09.120, 0, five W\n"),
              HasSubstr("unparsable number"));
}

TEST(Reader, LinesAcrossManySmallViews) {
  // Views of max_line_bytes + 2 = 34 bytes: most lines straddle two views. Values chosen so
  // that every number is known: t = i / 10 written with one decimal, GPU i % 3, power i + 0.25.
  std::string text = "t_s,gpu,power_w\n";
  for (int i = 0; i < 3000; ++i) {
    text += std::to_string(i / 10) + "." + std::to_string(i % 10) + "," + std::to_string(i % 3) +
            "," + std::to_string(i) + ".25\n";
  }
  ReadOptions options;
  options.max_line_bytes = 32;
  options.view_bytes = 1;
  auto c = Read(text, options);
  ASSERT_TRUE(c.summary.ok()) << c.summary.error().message();
  EXPECT_EQ(c.summary->samples, 3000u);
  const auto& s = c.sink.series();
  ASSERT_EQ(s.size(), 3u);
  for (int i = 0; i < 3000; ++i) {
    const auto& g = s[i % 3];
    EXPECT_EQ(
        g.t_s[i / 3],
        std::strtod((std::to_string(i / 10) + "." + std::to_string(i % 10)).c_str(), nullptr));
    EXPECT_EQ(g.power_w[i / 3], i + 0.25);
  }
}

TEST(Reader, PlainDecimalsOnTheFastPathReadAsStrtodReadsThem) {
  // The minimal layout's fast path (digits, table of hundredths) and the checked path (signs,
  // exponents, long mantissas) must both give strtod's value. (Powers stay within the 10 kW
  // bound; the long mantissas have their digits after the point.)
  const std::vector<std::string> powers = {"0",
                                           "7",
                                           "69.85",
                                           "0.5",
                                           "5.",
                                           ".5",
                                           "-0",
                                           "1310.71",
                                           "1310.72",
                                           "655.355",
                                           "9999.999",
                                           "1e2",
                                           "2.5E1",
                                           "0.01",
                                           "1234.56789012345",
                                           "1234.567890123456",
                                           "9999.99999999999",
                                           "000000000000001",
                                           "0.000000000000001",
                                           "42.10"};
  std::string text = "t_s,gpu,power_w\n";
  for (size_t i = 0; i < powers.size(); ++i) text += std::to_string(i) + ",0," + powers[i] + "\n";
  auto c = Read(text);
  ASSERT_TRUE(c.summary.ok()) << c.summary.error().message();
  const auto& p = c.sink.series()[0].power_w;
  ASSERT_EQ(p.size(), powers.size());
  for (size_t i = 0; i < powers.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint64_t>(p[i]),
              std::bit_cast<uint64_t>(std::strtod(powers[i].c_str(), nullptr)))
        << powers[i];
  }
}

TEST(Reader, ByteAtATimeReadsGiveWhatViewsGive) {
  // Found by the differential fuzzer: a BOM arriving a byte at a time, and a line over the limit
  // that also has a bad field (the length is what is reported, however the bytes arrived).
  ReadOptions options;
  options.max_line_bytes = 64;
  const std::string bom = "\xEF\xBB\xBFt_s,gpu,power_w\n0,0,5\n";
  const std::string long_bad = "t_s,gpu,power_w\n0,0,5\nx" + std::string(80, 'p') + ",0,5\n";
  for (size_t chunk : {1u, 2u, 5u, 1000u}) {
    CollectingSink sink;
    TrickleSource source(bom, chunk);
    auto summary = ReadTrace(source, "x.csv", options, sink);
    ASSERT_TRUE(summary.ok()) << chunk << ": " << summary.error().message();
    EXPECT_EQ(sink.series()[0].power_w, (std::vector<double>{5.0})) << chunk;
    TrickleSource long_source(long_bad, chunk);
    auto failed = ReadTrace(long_source, "x.csv", options, sink);
    ASSERT_FALSE(failed.ok());
    EXPECT_THAT(failed.error().message(), HasSubstr("x.csv:3: line longer than 64 bytes")) << chunk;
  }
  EXPECT_THAT(ErrorOf(long_bad, options), HasSubstr("x.csv:3: line longer than 64 bytes"));
}

TEST(FileSource, AFileThatShrinksUnderItsViewIsAnErrorNotACrash) {
  char path[] = "/tmp/headroom_shrink_XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string line = "0,0,100\n";
  std::string text = "t_s,gpu,power_w\n";
  while (text.size() < (size_t{1} << 20)) text += line;
  ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  auto source = FileSource::Open(path);
  ASSERT_TRUE(source.ok());
  auto view = (*source)->View(0, text.size());
  ASSERT_TRUE(view.ok() && view->has_value());
  ASSERT_EQ((*view)->size(), text.size());
  ASSERT_EQ(::ftruncate(fd, 4096), 0);  // the file shrinks under the mapping
  // Touching the lost pages would raise SIGBUS; the guard reads them as zeros instead.
  size_t newlines = 0;
  for (char ch : **view) newlines += ch == '\n';
  EXPECT_LT(newlines, text.size() / line.size());
  auto next = (*source)->View(text.size(), 4096);
  ASSERT_FALSE(next.ok());
  EXPECT_THAT(next.error().message(), HasSubstr("shrank while being read"));
  ::close(fd);
  ::unlink(path);
}

TEST(FileSource, ReadsAFileThroughViews) {
  char path[] = "/tmp/headroom_views_XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  std::string text = "t_s,gpu,power_w\n";
  for (int i = 0; i < 50000; ++i)
    text += std::to_string(i) + ",0," + std::to_string(i % 500) + "\n";
  ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fd);
  ReadOptions options;
  options.view_bytes = 4096;  // many windows, each mapped at a page boundary
  options.max_line_bytes = 64;
  CollectingSink sink;
  auto summary = ReadTraceFile(path, options, sink);
  ::unlink(path);
  ASSERT_TRUE(summary.ok()) << summary.error().message();
  EXPECT_EQ(summary->samples, 50000u);
  const auto& s = sink.series()[0];
  EXPECT_EQ(s.t_s.back(), 49999.0);
  EXPECT_EQ(s.power_w[12345], 12345.0 - 24 * 500);
}

}  // namespace
}  // namespace headroom::trace
