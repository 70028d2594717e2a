// prom/: times, chunks, answers, GPU names, and whole ranges fetched through a fake server with
// Prometheus's semantics (fake_prometheus.h) and through HTTP (http_api.h) to a local server.
// Every expected value is worked out here, not by the code under test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fake_prometheus.h"
#include "prom/api.h"
#include "prom/fetch.h"
#include "prom/http_api.h"
#include "prom/range_query.h"
#include "support/trickling_server.h"

namespace headroom::prom {
namespace {

using test::FakePrometheus;
using ::testing::HasSubstr;
using Labels = std::map<std::string, std::string>;

// 2023-11-14T22:13:20Z (date -u -d @1700000000).
constexpr int64_t kT0Ms = 1700000000000;
constexpr int64_t kScrapeMs = 500;
constexpr const char* kMetric = "DCGM_FI_DEV_POWER_USAGE";

// ---------------------------------------------------------------------------------------------
// ParseTimeMs

TEST(PromTime, UnixSecondsToTheMillisecond) {
  EXPECT_EQ(*ParseTimeMs("1700000000", "--start"), 1700000000000);
  EXPECT_EQ(*ParseTimeMs("1700000000.5", "--start"), 1700000000500);
  EXPECT_EQ(*ParseTimeMs("1700000000.05", "--start"), 1700000000050);
  EXPECT_EQ(*ParseTimeMs("1700000000.123", "--start"), 1700000000123);
  EXPECT_EQ(*ParseTimeMs("0", "--start"), 0);
}

TEST(PromTime, Rfc3339WithZAndWithOffsets) {
  EXPECT_EQ(*ParseTimeMs("2023-11-14T22:13:20Z", "--start"), 1700000000000);
  EXPECT_EQ(*ParseTimeMs("2023-11-14T22:13:20.5Z", "--start"), 1700000000500);
  // 23:13:20.250 at UTC+1 is 22:13:20.250 UTC; 17:13:20 at UTC-5 is 22:13:20 UTC.
  EXPECT_EQ(*ParseTimeMs("2023-11-14T23:13:20.25+01:00", "--start"), 1700000000250);
  EXPECT_EQ(*ParseTimeMs("2023-11-14T17:13:20-05:00", "--start"), 1700000000000);
  // Across midnight and a leap day: 2024-02-29T00:00:00Z is 1709164800 (date -u -d ... +%s).
  EXPECT_EQ(*ParseTimeMs("2024-02-28T23:30:00-00:30", "--end"), 1709164800000);
  EXPECT_EQ(*ParseTimeMs("1970-01-01T00:00:00Z", "--end"), 0);
  // Prometheus writes RFC 3339 with nanoseconds: digits past the millisecond are dropped.
  EXPECT_EQ(*ParseTimeMs("2023-11-14T22:13:20.123456789Z", "--start"), 1700000000123);
  EXPECT_EQ(*ParseTimeMs("2023-11-14T22:13:20.5678Z", "--start"), 1700000000567);
}

TEST(PromTime, GarbageIsAUsageErrorNamingTheFlag) {
  for (const char* bad :
       {"", "yesterday", "1.2345", "-5", "17e8", "1700000000.", "2023-13-01T00:00:00Z",
        "2023-11-14T22:13:20", "2023-11-14T25:00:00Z", "2023-11-14 22:13:20Z",
        "2023-11-14T22:13:20+0100", "2023-11-14T22:13:20.1234567890Z", "2023-02-29T00:00:00Z",
        "2024-02-30T00:00:00Z", "2023-04-31T00:00:00Z"}) {
    const auto r = ParseTimeMs(bad, "--end");
    ASSERT_FALSE(r.ok()) << "'" << bad << "' parsed as " << *r;
    EXPECT_EQ(r.error().kind(), ErrorKind::kUsage);
    EXPECT_THAT(r.error().message(), HasSubstr("--end")) << bad;
  }
}

// ---------------------------------------------------------------------------------------------
// ChunkRange

RangeQuery Query(int64_t start_ms, int64_t end_ms, int64_t step_ms) {
  RangeQuery q;
  q.query = kMetric;
  q.start_ms = start_ms;
  q.end_ms = end_ms;
  q.step_ms = step_ms;
  return q;
}

// The instants of a query, as Prometheus evaluates it.
std::vector<int64_t> Instants(const RangeQuery& q) {
  std::vector<int64_t> out;
  for (int64_t t = q.start_ms; t <= q.end_ms; t += q.step_ms) out.push_back(t);
  return out;
}

TEST(PromChunks, EveryInstantOnceInOrderEachChunkAtMostMaxPoints) {
  struct Case {
    int64_t start_ms, end_ms, step_ms, max_points;
    size_t instants, chunks;
  };
  const Case cases[] = {
      {kT0Ms, kT0Ms + 99 * 250, 250, 7, 100, 15},     // 14 chunks of 7, one of 2
      {kT0Ms, kT0Ms + 10 * 250 + 3, 250, 11, 11, 1},  // end off the grid: last instant +10 steps
      {kT0Ms, kT0Ms + 10 * 250 + 3, 250, 10, 11, 2},  // one too many for one chunk
      {kT0Ms, kT0Ms, 1000, 5, 1, 1},                  // start == end: one instant
      {kT0Ms, kT0Ms + 20999 * 1000, 1000, 10000, 21000, 3},
      {0, 6, 1, 1, 7, 7},
  };
  for (const Case& c : cases) {
    const RangeQuery q = Query(c.start_ms, c.end_ms, c.step_ms);
    const auto chunks = ChunkRange(q, c.max_points);
    ASSERT_TRUE(chunks.ok()) << chunks.error().message();
    ASSERT_EQ(chunks->size(), c.chunks);
    std::vector<int64_t> all;
    for (const RangeQuery& chunk : *chunks) {
      EXPECT_EQ(chunk.query, q.query);
      EXPECT_EQ(chunk.step_ms, q.step_ms);
      const std::vector<int64_t> mine = Instants(chunk);
      EXPECT_GE(mine.size(), 1u);
      EXPECT_LE(static_cast<int64_t>(mine.size()), c.max_points);
      all.insert(all.end(), mine.begin(), mine.end());
    }
    ASSERT_EQ(all.size(), c.instants);
    for (size_t k = 0; k < all.size(); ++k) {
      ASSERT_EQ(all[k], c.start_ms + static_cast<int64_t>(k) * c.step_ms) << "instant " << k;
    }
    EXPECT_LE(all.back(), c.end_ms);
    EXPECT_GT(all.back() + c.step_ms, c.end_ms);
  }
}

TEST(PromChunks, BadRangesAreUsageErrorsNamingTheFlag) {
  const auto expect_error = [](const RangeQuery& q, int64_t max_points, const char* what) {
    const auto r = ChunkRange(q, max_points);
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_EQ(r.error().kind(), ErrorKind::kUsage);
    EXPECT_THAT(r.error().message(), HasSubstr(what));
  };
  expect_error(Query(kT0Ms, kT0Ms - 1, 500), 100, "--end");
  expect_error(Query(kT0Ms, kT0Ms + 1000, 0), 100, "--step");
  expect_error(Query(kT0Ms, kT0Ms + 1000, -500), 100, "--step");
  RangeQuery no_query = Query(kT0Ms, kT0Ms + 1000, 500);
  no_query.query.clear();
  expect_error(no_query, 100, "--query");
  expect_error(Query(kT0Ms, kT0Ms + 1000, 500), 0, "points");
}

// ---------------------------------------------------------------------------------------------
// ParseMatrix

TEST(PromAnswer, ReadsSeriesLabelsTimesAndValues) {
  const std::string body = R"({"status":"success","data":{"resultType":"matrix","result":[
      {"metric":{"__name__":"DCGM_FI_DEV_POWER_USAGE","gpu":"0","Hostname":"node1"},
       "values":[[1700000000,"312.5"],[1700000000.5,"313"],[1700000001.25,"1e2"]]},
      {"metric":{"gpu":"1"},"values":[]}]}})";
  const auto series = ParseMatrix(body, "answer.json");
  ASSERT_TRUE(series.ok()) << series.error().message();
  ASSERT_EQ(series->size(), 2u);
  const Series& s = (*series)[0];
  EXPECT_EQ(s.labels, (Labels{{"__name__", kMetric}, {"gpu", "0"}, {"Hostname", "node1"}}));
  EXPECT_EQ(s.t_ms, (std::vector<int64_t>{1700000000000, 1700000000500, 1700000001250}));
  EXPECT_EQ(s.value, (std::vector<double>{312.5, 313.0, 100.0}));
  EXPECT_TRUE((*series)[1].t_ms.empty());
}

TEST(PromAnswer, AnEmptyResultIsNoSeries) {
  const auto series =
      ParseMatrix(R"({"status":"success","data":{"resultType":"matrix","result":[]}})", "x");
  ASSERT_TRUE(series.ok());
  EXPECT_TRUE(series->empty());
}

TEST(PromAnswer, BadAnswersAreInputErrorsNamingTheSource) {
  struct Case {
    std::string body;
    std::vector<std::string> says;
  };
  const std::string ok_head = R"({"status":"success","data":{"resultType":"matrix","result":[)";
  const std::vector<Case> cases = {
      {R"json({"status":"error","errorType":"bad_data","error":"exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)"})json",
       {"bad_data", "exceeded maximum resolution"}},
      {R"({"status":"error","errorType":"timeout","error":"query timed out in query execution"})",
       {"timeout", "query timed out"}},
      {R"({"status":"success","data":{"resultType":"vector","result":[]}})", {"vector"}},
      {R"({"status":"success","data":{"resultType":"scalar","result":[1700000000,"1"]}})",
       {"scalar"}},
      {ok_head + R"({"metric":{"gpu":"0"},"values":[[1700000000,"NaN"]]}]}})",
       {"NaN", "not a finite number", "gpu=\"0\""}},
      {ok_head + R"({"metric":{"gpu":"0"},"values":[[1700000000,"+Inf"]]}]}})",
       {"+Inf", "not a finite number"}},
      {ok_head + R"({"metric":{"gpu":"0"},"values":[[1700000000,"-Inf"]]}]}})",
       {"-Inf", "not a finite number"}},
      {ok_head + R"({"metric":{"gpu":"0"},"values":[[1700000000,"12,5"]]}]}})",
       {"12,5", "not a finite number"}},
      {ok_head + R"({"metric":{"gpu":"0"},"values":[[1700000000,312.5]]}]}})",
       {"not [time, \"value\"]"}},
      {ok_head + R"({"metric":{"gpu":"3"},"values":[[1700000001,"1"],[1700000000.5,"2"]]}]}})",
       {"out of order", "gpu=\"3\""}},
      {ok_head + R"({"metric":{"gpu":"3"},"values":[[1700000001,"1"],[1700000001,"1"]]}]}})",
       {"out of order"}},
      {ok_head + R"({"metric":{"gpu":"3"},"values":[[1700000000000,"1"]]}]}})",
       {"time 1700000000000 is not Unix seconds", "gpu=\"3\""}},
      {ok_head + R"({"metric":{"gpu":"3"},"values":[[-1,"1"]]}]}})",
       {"time -1 is not Unix seconds"}},
      {ok_head + R"({"metric":{"gpu":"3"},"values":[[4e46,"1"]]}]}})", {"is not Unix seconds"}},
      {ok_head + R"({"metric":{"gpu":0},"values":[]}]}})", {"label 'gpu'"}},
      {"<html>502 Bad Gateway</html>", {"not a Prometheus API answer"}},
      {R"({"data":{}})", {"status"}},
      {R"({"status":"success"})", {"resultType"}},
  };
  for (const Case& c : cases) {
    const auto r = ParseMatrix(c.body, "prometheus://prom.example:9090");
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.error().kind(), ErrorKind::kInput);
    EXPECT_THAT(r.error().message(), HasSubstr("prometheus://prom.example:9090")) << c.body;
    for (const std::string& s : c.says) EXPECT_THAT(r.error().message(), HasSubstr(s)) << c.body;
  }
}

// ---------------------------------------------------------------------------------------------
// GPU names

Series WithLabels(Labels labels) {
  Series s;
  s.labels = std::move(labels);
  s.t_ms = {kT0Ms};
  s.value = {300.0};
  return s;
}

std::vector<std::string> Names(const std::vector<Series>& series) {
  const auto names = SeriesNames(series, "src");
  EXPECT_TRUE(names.ok()) << names.error().message();
  return names.ok() ? *names : std::vector<std::string>{};
}

TEST(PromNames, OneHostIsTheGpuLabel) {
  EXPECT_EQ(Names({WithLabels({{"gpu", "0"}, {"Hostname", "node1"}, {"UUID", "GPU-a"}}),
                   WithLabels({{"gpu", "1"}, {"Hostname", "node1"}, {"UUID", "GPU-b"}})}),
            (std::vector<std::string>{"0", "1"}));
  // The agent's headroom_power_watts{gpu}: one scrape target.
  EXPECT_EQ(Names({WithLabels({{"gpu", "0"}, {"instance", "n1:9401"}}),
                   WithLabels({{"gpu", "1"}, {"instance", "n1:9401"}})}),
            (std::vector<std::string>{"0", "1"}));
}

TEST(PromNames, TwoHostsArePrefixedByHostname) {
  EXPECT_EQ(Names({WithLabels({{"gpu", "0"}, {"Hostname", "node1"}, {"instance", "a:10470"}}),
                   WithLabels({{"gpu", "1"}, {"Hostname", "node1"}, {"instance", "a:10470"}}),
                   WithLabels({{"gpu", "0"}, {"Hostname", "node2"}, {"instance", "b:10470"}})}),
            (std::vector<std::string>{"node1/0", "node1/1", "node2/0"}));
}

TEST(PromNames, WithoutHostnameTheInstance) {
  EXPECT_EQ(Names({WithLabels({{"gpu", "0"}, {"instance", "10.0.0.1:10470"}}),
                   WithLabels({{"gpu", "0"}, {"instance", "10.0.0.2:10470"}})}),
            (std::vector<std::string>{"10.0.0.1:10470/0", "10.0.0.2:10470/0"}));
}

TEST(PromNames, WithoutGpuTheUuidThenAllLabels) {
  EXPECT_EQ(Names({WithLabels({{"UUID", "GPU-5c3a"}, {"Hostname", "node1"}}),
                   WithLabels({{"UUID", "GPU-77b1"}, {"Hostname", "node2"}})}),
            (std::vector<std::string>{"GPU-5c3a", "GPU-77b1"}));
  EXPECT_EQ(Names({WithLabels({{"job", "a"}, {"site", "x"}})}),
            (std::vector<std::string>{R"({job="a",site="x"})"}));
}

TEST(PromNames, TwoSeriesWithOneNameAreAnError) {
  // One GPU scraped by two jobs: same gpu, same Hostname.
  const auto r = SeriesNames({WithLabels({{"gpu", "0"}, {"Hostname", "n1"}, {"job", "dcgm"}}),
                              WithLabels({{"gpu", "0"}, {"Hostname", "n1"}, {"job", "dcgm2"}})},
                             "prometheus://p:9090");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind(), ErrorKind::kInput);
  EXPECT_THAT(r.error().message(), HasSubstr("prometheus://p:9090"));
  EXPECT_THAT(r.error().message(), HasSubstr("'0'"));
}

TEST(PromTrace, NamesThatNeedQuotingAreQuotedInTheCsv) {
  Series s = WithLabels({{"job", "a"}, {"site", "x"}});
  const auto trace = ToTrace({s}, kT0Ms, "r", "src");
  ASSERT_TRUE(trace.ok()) << trace.error().message();
  EXPECT_EQ(trace->csv, "t_s,gpu,power_w\n0,\"{job=\"\"a\"\",site=\"\"x\"\"}\",300\n");
  EXPECT_EQ(trace->series, 1u);
  EXPECT_EQ(trace->samples, 1u);
}

TEST(PromTrace, NoSamplesIsAnError) {
  Series empty;
  empty.labels = {{"gpu", "0"}};
  const auto r = ToTrace({empty}, kT0Ms, "r", "prometheus://p:9090");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("no samples"));
  EXPECT_FALSE(ToTrace({}, kT0Ms, "r", "src").ok());
}

// ---------------------------------------------------------------------------------------------
// FetchRange through a server with Prometheus's semantics

struct Row {
  double t_s;
  std::string gpu;
  double power_w;
  bool operator==(const Row&) const = default;
};

// headroom's long CSV as the test reads it (names without quotes only).
std::vector<Row> ReadCsv(const std::string& csv) {
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "t_s,gpu,power_w");
  std::vector<Row> rows;
  while (std::getline(in, line)) {
    const size_t a = line.find(','), b = line.find(',', a + 1);
    rows.push_back({std::stod(line.substr(0, a)), line.substr(a + 1, b - a - 1),
                    std::stod(line.substr(b + 1))});
  }
  return rows;
}

constexpr int kGpus = 3;
constexpr int kScrapes = 50;

// The scraped power of GPU g at scrape k: 0.1 W resolution, no pattern the code could exploit.
double RawW(int64_t g, int64_t k) {
  return 200.0 + 0.1 * static_cast<double>((g * 7919 + k * 104729) % 4000);
}

Labels GpuLabels(int g) {
  return {{"__name__", kMetric},
          {"gpu", std::to_string(g)},
          {"UUID", "GPU-000" + std::to_string(g)},
          {"Hostname", "node1"},
          {"instance", "10.0.0.1:10470"},
          {"job", "dcgm"}};
}

// kGpus GPUs scraped every kScrapeMs from kT0Ms; GPU 0 starts `late` scrapes late.
FakePrometheus Scraped(int late = 0) {
  FakePrometheus fake;
  for (int k = 0; k < kScrapes; ++k) {
    for (int g = 0; g < kGpus; ++g) {
      if (g == 0 && k < late) continue;
      fake.Add(GpuLabels(g), kT0Ms + k * kScrapeMs, RawW(g, k));
    }
  }
  return fake;
}

Trace Fetch(FakePrometheus& fake, const RangeQuery& q, int64_t max_points) {
  FetchOptions options;
  options.max_points = max_points;
  auto trace = FetchRange(fake, q, options);
  EXPECT_TRUE(trace.ok()) << trace.error().message();
  return trace.ok() ? std::move(*trace) : Trace{};
}

TEST(PromFetch, AtTheScrapeIntervalOnTheScrapesItIsTheRawSamples) {
  FakePrometheus fake = Scraped();
  const Trace trace =
      Fetch(fake, Query(kT0Ms, kT0Ms + (kScrapes - 1) * kScrapeMs, kScrapeMs), kDefaultMaxPoints);
  EXPECT_EQ(fake.calls(), 1);
  std::vector<Row> expected;
  for (int k = 0; k < kScrapes; ++k) {
    for (int g = 0; g < kGpus; ++g) expected.push_back({k * 0.5, std::to_string(g), RawW(g, k)});
  }
  EXPECT_EQ(ReadCsv(trace.csv), expected);
  EXPECT_EQ(trace.series, static_cast<size_t>(kGpus));
  EXPECT_EQ(trace.samples, static_cast<size_t>(kGpus * kScrapes));
  EXPECT_EQ(trace.t0_ms, kT0Ms);
}

TEST(PromFetch, ChunkedIsTheSameTraceAsOneQueryOneCallPerChunk) {
  const RangeQuery q = Query(kT0Ms, kT0Ms + (kScrapes - 1) * kScrapeMs, kScrapeMs);
  FakePrometheus whole = Scraped();
  const Trace one = Fetch(whole, q, kDefaultMaxPoints);
  EXPECT_EQ(whole.calls(), 1);

  FakePrometheus chunked = Scraped();
  std::vector<std::pair<size_t, size_t>> progress;
  FetchOptions options;
  options.max_points = 7;
  options.on_chunk = [&](size_t done, size_t total) { progress.emplace_back(done, total); };
  const auto seven = FetchRange(chunked, q, options);
  ASSERT_TRUE(seven.ok()) << seven.error().message();
  // 50 instants in chunks of 7: 7 x 7 + 1.
  constexpr int kChunks = 8;
  EXPECT_EQ(chunked.calls(), kChunks);
  EXPECT_EQ(seven->csv, one.csv);
  EXPECT_EQ(seven->resolution, one.resolution);
  ASSERT_EQ(progress.size(), static_cast<size_t>(kChunks));
  for (size_t k = 0; k < progress.size(); ++k) {
    EXPECT_EQ(progress[k], std::make_pair(k + 1, size_t{kChunks}));
  }
  // The queries asked cover the range, each instant once, each within Prometheus's limit.
  int64_t next = q.start_ms;
  for (const RangeQuery& asked : chunked.queries()) {
    EXPECT_EQ(asked.query, q.query);
    EXPECT_EQ(asked.step_ms, q.step_ms);
    EXPECT_EQ(asked.start_ms, next);
    EXPECT_LE((asked.end_ms - asked.start_ms) / asked.step_ms + 1, 7);
    next = asked.end_ms + asked.step_ms;
  }
  EXPECT_EQ(next, q.end_ms + q.step_ms);
}

TEST(PromFetch, ChunkedIsTheSameTraceWhenAGpuAppearsOnlyInALaterChunk) {
  // GPU 0 first scraped at scrape 20: absent from the first chunks of 7.
  const RangeQuery q = Query(kT0Ms, kT0Ms + (kScrapes - 1) * kScrapeMs, kScrapeMs);
  FakePrometheus whole = Scraped(/*late=*/20);
  FakePrometheus chunked = Scraped(/*late=*/20);
  const Trace one = Fetch(whole, q, kDefaultMaxPoints);
  const Trace seven = Fetch(chunked, q, 7);
  EXPECT_EQ(seven.csv, one.csv);
  EXPECT_EQ(seven.samples, static_cast<size_t>(kGpus * kScrapes - 20));
  // At each time the GPUs come in one order (the answer's: sorted by labels).
  const std::vector<Row> rows = ReadCsv(one.csv);
  ASSERT_EQ(rows.size(), seven.samples);
  EXPECT_EQ(rows[20 * (kGpus - 1)], (Row{10.0, "0", RawW(0, 20)}));
  EXPECT_EQ(rows[20 * (kGpus - 1) + 1], (Row{10.0, "1", RawW(1, 20)}));
}

TEST(PromFetch, ALongRangeAtTheLimitIsAskedInChunksPrometheusAccepts) {
  FakePrometheus fake;
  constexpr int64_t kSamples = 25000;
  for (int64_t k = 0; k < kSamples; ++k) fake.Add(GpuLabels(0), kT0Ms + k * 1000, RawW(0, k));
  const RangeQuery q = Query(kT0Ms, kT0Ms + (kSamples - 1) * 1000, 1000);
  const Trace trace = Fetch(fake, q, kPrometheusMaxPoints);
  EXPECT_EQ(fake.calls(), 3);  // 11,000 + 11,000 + 3,000
  EXPECT_EQ(trace.samples, static_cast<size_t>(kSamples));
  const std::vector<Row> rows = ReadCsv(trace.csv);
  ASSERT_EQ(rows.size(), static_cast<size_t>(kSamples));
  for (int64_t k = 0; k < kSamples; k += 997) {
    ASSERT_EQ(rows[k], (Row{static_cast<double>(k), "0", RawW(0, k)}));
  }
}

TEST(PromFetch, AFinerStepRepeatsASampleACoarserOneSkips) {
  const int64_t end_ms = kT0Ms + (kScrapes - 1) * kScrapeMs;
  {
    FakePrometheus fake = Scraped();
    const std::vector<Row> rows = ReadCsv(Fetch(fake, Query(kT0Ms, end_ms, 250), 7).csv);
    ASSERT_EQ(rows.size(), static_cast<size_t>(kGpus * (2 * kScrapes - 1)));
    for (size_t i = 0; i < rows.size(); ++i) {
      const int instant = static_cast<int>(i) / kGpus, g = static_cast<int>(i) % kGpus;
      ASSERT_EQ(rows[i], (Row{instant * 0.25, std::to_string(g), RawW(g, instant / 2)})) << i;
    }
  }
  {
    FakePrometheus fake = Scraped();
    const std::vector<Row> rows = ReadCsv(Fetch(fake, Query(kT0Ms, end_ms, 1000), 7).csv);
    ASSERT_EQ(rows.size(), static_cast<size_t>(kGpus * kScrapes / 2));
    for (size_t i = 0; i < rows.size(); ++i) {
      const int instant = static_cast<int>(i) / kGpus, g = static_cast<int>(i) % kGpus;
      // Scrape 2 * instant: the odd scrapes are skipped, not averaged in.
      ASSERT_EQ(rows[i], (Row{instant * 1.0, std::to_string(g), RawW(g, 2 * instant)})) << i;
    }
  }
}

TEST(PromFetch, TimeCountsFromTheQueryStartAndInstantsBeforeTheFirstScrapeAreEmpty) {
  FakePrometheus fake = Scraped();
  // From 1 s before the first scrape, off the scrape grid by 100 ms.
  const std::vector<Row> rows = ReadCsv(Fetch(fake, Query(kT0Ms - 1000, kT0Ms + 1100, 300), 7).csv);
  // Instants at -1000, -700, -400, -100 ms have nothing; then 200 (scrape 0), 500 (1),
  // 800 (1), 1100 (2) ms.
  const int scrape_at[] = {0, 1, 1, 2};
  ASSERT_EQ(rows.size(), static_cast<size_t>(4 * kGpus));
  for (size_t i = 0; i < rows.size(); ++i) {
    const int n = static_cast<int>(i) / kGpus, g = static_cast<int>(i) % kGpus;
    const double t_s = (1200 + 300 * n) / 1000.0;
    EXPECT_EQ(rows[i], (Row{t_s, std::to_string(g), RawW(g, scrape_at[n])})) << i;
  }
}

TEST(PromFetch, ResolutionSaysTheStepAndThatItIsNotAnAverage) {
  FakePrometheus fake = Scraped();
  const Trace trace = Fetch(fake, Query(kT0Ms, kT0Ms + 10000, 250), 7);
  EXPECT_THAT(trace.resolution, HasSubstr("0.25 s"));
  EXPECT_THAT(trace.resolution, HasSubstr("latest"));
  EXPECT_THAT(ResolutionText(500), HasSubstr("step 0.5 s"));
  EXPECT_THAT(ResolutionText(60000), HasSubstr("step 60 s"));
}

TEST(PromFetch, NoSeriesInTheRangeIsAnErrorNamingTheServer) {
  FakePrometheus fake = Scraped();
  RangeQuery q = Query(kT0Ms, kT0Ms + 10000, 500);
  q.query = "DCGM_FI_DEV_GPU_TEMP";
  const auto r = FetchRange(fake, q, {});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr(FakePrometheus::kName));
  EXPECT_THAT(r.error().message(), HasSubstr("no samples"));
  // More than 5 min after the last scrape there is nothing either.
  const int64_t after = kT0Ms + kScrapes * kScrapeMs + FakePrometheus::kLookbackMs;
  EXPECT_FALSE(FetchRange(fake, Query(after, after + 10000, 500), {}).ok());
}

TEST(PromFetch, MoreSeriesThanTheBoundIsAnErrorNamingTheOption) {
  // A selector without a host filter on a large cluster: one series per GPU, thousands.
  const RangeQuery q = Query(kT0Ms, kT0Ms + (kScrapes - 1) * kScrapeMs, kScrapeMs);
  FakePrometheus fake = Scraped();
  FetchOptions options;
  options.max_series = kGpus - 1;
  const auto r = FetchRange(fake, q, options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind(), ErrorKind::kInput);
  EXPECT_THAT(r.error().message(),
              HasSubstr("the query answered 3 series, more than 2 GPUs, the bound on GPUs per "
                        "trace (narrow --query, e.g. to one host, or raise --max-gpus)"));
  options.max_series = kGpus;
  EXPECT_TRUE(FetchRange(fake, q, options).ok());
}

TEST(PromFetch, ServerErrorsEndTheFetch) {
  const RangeQuery q = Query(kT0Ms, kT0Ms + (kScrapes - 1) * kScrapeMs, kScrapeMs);
  {
    FakePrometheus fake = Scraped();
    fake.FailCall(3);
    const auto r = FetchRange(fake, q, {.max_points = 7, .on_chunk = {}});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().kind(), ErrorKind::kIo);
    EXPECT_EQ(fake.calls(), 3);
  }
  {
    // Prometheus's own refusal, had a chunk been too long, comes through with its words.
    FakePrometheus fake = Scraped();
    const auto body = fake.QueryRange(Query(kT0Ms, kT0Ms + 11001 * 1000, 1000));
    ASSERT_TRUE(body.ok());
    const auto r = ParseMatrix(*body, fake.Name());
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.error().message(), HasSubstr("exceeded maximum resolution of 11,000 points"));
    // 11,001 instants, (end - start) / step = 11,000: Prometheus still answers.
    EXPECT_TRUE(ParseMatrix(*fake.QueryRange(Query(kT0Ms, kT0Ms + 11000 * 1000, 1000)), "x").ok());
  }
  {
    FakePrometheus fake = Scraped();
    for (const int64_t bad : {int64_t{0}, kPrometheusMaxPoints + 1}) {
      const auto r = FetchRange(fake, q, {.max_points = bad, .on_chunk = {}});
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.error().kind(), ErrorKind::kUsage);
    }
    EXPECT_EQ(fake.calls(), 0);
  }
}

// A server that answers another range than the one asked: the same first chunk to every
// query, or the range asked widened by `widen_ms` either side.
class OtherRange final : public PrometheusApi {
 public:
  OtherRange(FakePrometheus& fake, int64_t widen_ms) : fake_(fake), widen_ms_(widen_ms) {}
  std::string Name() const override { return fake_.Name(); }
  Result<std::string> QueryRange(const RangeQuery& q) override {
    if (!first_) first_ = q;
    RangeQuery answered = widen_ms_ > 0 ? q : *first_;
    answered.start_ms -= widen_ms_;
    answered.end_ms += widen_ms_;
    return fake_.QueryRange(answered);
  }

 private:
  FakePrometheus& fake_;
  int64_t widen_ms_;
  std::optional<RangeQuery> first_;
};

TEST(PromFetch, AnAnswerOutsideTheRangeAskedIsRefusedNotJoined) {
  // Before: the same chunk for every query gave each sample 7 times over (energy 0 between
  // them), and a widened answer a longer range than asked; both exited 0.
  const RangeQuery q = Query(kT0Ms + 10 * kScrapeMs, kT0Ms + 30 * kScrapeMs, kScrapeMs);
  {
    FakePrometheus fake = Scraped();
    OtherRange same(fake, 0);
    const auto r = FetchRange(same, q, {.max_points = 7, .on_chunk = {}});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().kind(), ErrorKind::kInput);
    // The second chunk asked 1700000008.500..1700000011.500 and got the first one's times.
    EXPECT_THAT(r.error().message(),
                HasSubstr("a sample at 1700000005.000 s, not an instant asked for (from "
                          "1700000008.500 to 1700000011.500 s every 0.5 s)"));
  }
  {
    FakePrometheus fake = Scraped();
    OtherRange wider(fake, 2 * kScrapeMs);
    const auto r = FetchRange(wider, q, {.max_points = kDefaultMaxPoints, .on_chunk = {}});
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.error().message(),
                HasSubstr("a sample at 1700000004.000 s, not an instant asked for (from "
                          "1700000005.000 to 1700000015.000 s every 0.5 s)"));
  }
  {
    // Off the grid inside the range: asked every 1 s from a half second, answered on whole ones.
    std::vector<Series> off = {{GpuLabels(0), {kT0Ms + 1000}, {200.0}}};
    EXPECT_FALSE(CheckAnswerTimes(off, Query(kT0Ms + 500, kT0Ms + 2500, 1000), "x").ok());
    EXPECT_TRUE(CheckAnswerTimes(off, Query(kT0Ms, kT0Ms + 2000, 1000), "x").ok());
  }
}

// ---------------------------------------------------------------------------------------------
// Saved answers

TEST(PromSavedAnswer, CountsFromTheFirstSampleAndSaysTheSpacing) {
  // GPU 1 starts a step later; t_s counts from the earliest sample of any series.
  const std::string body = R"({"status":"success","data":{"resultType":"matrix","result":[
      {"metric":{"__name__":"DCGM_FI_DEV_POWER_USAGE","gpu":"0","Hostname":"n1"},
       "values":[[1700000000,"300"],[1700000000.500,"301.5"],[1700000001,"302"]]},
      {"metric":{"__name__":"DCGM_FI_DEV_POWER_USAGE","gpu":"1","Hostname":"n1"},
       "values":[[1700000000.500,"400.1"],[1700000001,"400.2"]]}]}})";
  const auto trace = TraceFromSavedAnswer(body, "saved.json");
  ASSERT_TRUE(trace.ok()) << trace.error().message();
  EXPECT_EQ(ReadCsv(trace->csv), (std::vector<Row>{{0.0, "0", 300.0},
                                                   {0.5, "0", 301.5},
                                                   {0.5, "1", 400.1},
                                                   {1.0, "0", 302.0},
                                                   {1.0, "1", 400.2}}));
  EXPECT_EQ(trace->t0_ms, 1700000000000);
  EXPECT_THAT(trace->resolution, HasSubstr("0.5 s apart"));
  EXPECT_EQ(trace->samples, 5u);
}

TEST(PromSavedAnswer, WhatTheFakeAnswersReadsBackAsFetchRangeReadsIt) {
  FakePrometheus fake = Scraped();
  const RangeQuery q = Query(kT0Ms, kT0Ms + (kScrapes - 1) * kScrapeMs, kScrapeMs);
  const auto saved = TraceFromSavedAnswer(*fake.QueryRange(q), "saved.json");
  ASSERT_TRUE(saved.ok()) << saved.error().message();
  EXPECT_EQ(saved->csv, Fetch(fake, q, 7).csv);
  EXPECT_THAT(saved->resolution, HasSubstr("0.5 s apart"));
}

TEST(PromSavedAnswer, OneSamplePerGpuAndErrorsNameTheFile) {
  const auto one = TraceFromSavedAnswer(
      R"({"status":"success","data":{"resultType":"matrix","result":[
          {"metric":{"gpu":"0"},"values":[[1700000000,"300"]]}]}})",
      "one.json");
  ASSERT_TRUE(one.ok()) << one.error().message();
  EXPECT_EQ(one->csv, "t_s,gpu,power_w\n0,0,300\n");
  EXPECT_THAT(one->resolution, HasSubstr("one sample per GPU"));

  const auto bad = TraceFromSavedAnswer(
      R"({"status":"error","errorType":"bad_data","error":"parse error"})", "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error().message(), HasSubstr("bad.json"));
  EXPECT_THAT(bad.error().message(), HasSubstr("parse error"));
  const auto empty = TraceFromSavedAnswer(
      R"({"status":"success","data":{"resultType":"matrix","result":[]}})", "empty.json");
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.error().message(), HasSubstr("empty.json"));
}

// ---------------------------------------------------------------------------------------------
// The HTTP side, against a local server

TEST(PromEndpoint, HostPortAndPrefix) {
  const auto e = ParseEndpoint("prometheus://127.0.0.1:9090");
  ASSERT_TRUE(e.ok()) << e.error().message();
  EXPECT_EQ(e->host, "127.0.0.1");
  EXPECT_EQ(e->port, 9090);
  EXPECT_EQ(e->path_prefix, "");
  const auto p = ParseEndpoint("prometheus://prom.example.org:443/prometheus/");
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_EQ(p->host, "prom.example.org");
  EXPECT_EQ(p->port, 443);
  EXPECT_EQ(p->path_prefix, "/prometheus");
  EXPECT_EQ(ParseEndpoint("prometheus://h:1/")->path_prefix, "");
  for (const char* bad : {"http://h:9090", "prometheus://h", "prometheus://:9090",
                          "prometheus://h:0", "prometheus://h:65536", "prometheus://h:90x",
                          "prometheus://user@h:9090", "prometheus://h:9090/p?x=1"}) {
    const auto r = ParseEndpoint(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().kind(), ErrorKind::kUsage);
  }
  EXPECT_TRUE(IsPrometheusUrl("prometheus://h:1"));
  EXPECT_FALSE(IsPrometheusUrl("run.csv"));
}

// A server on a free loopback port, serving in its own thread until the object goes.
class LocalServer {
 public:
  explicit LocalServer(httplib::Server::Handler handler) {
    server_.Get("/prefix/api/v1/query_range", std::move(handler));
    port_ = server_.bind_to_any_port("127.0.0.1");  // connections queue from here on
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() is a no-op until the thread runs the accept loop: wait for it.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (port_ > 0 && !server_.is_running() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  ~LocalServer() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

TEST(PromHttp, SendsTheRangeAndTokenAndHandsBackTheBody) {
  std::mutex mu;  // the server's thread writes, the test's reads
  std::vector<std::map<std::string, std::string>> asked;
  std::vector<std::string> tokens;
  LocalServer server([&](const httplib::Request& req, httplib::Response& res) {
    const std::lock_guard<std::mutex> lock(mu);
    asked.push_back({{"query", req.get_param_value("query")},
                     {"start", req.get_param_value("start")},
                     {"end", req.get_param_value("end")},
                     {"step", req.get_param_value("step")}});
    tokens.push_back(req.get_header_value("Authorization"));
    res.set_content(R"({"status":"success","data":{"resultType":"matrix","result":[]}})",
                    "application/json");
  });
  ASSERT_GT(server.port(), 0);
  HttpOptions options;
  options.timeout_s = 5.0;
  options.bearer_token = "s3cret";
  auto api = MakeHttpApi({"127.0.0.1", server.port(), "/prefix"}, options);
  EXPECT_EQ(api->Name(), "prometheus://127.0.0.1:" + std::to_string(server.port()) + "/prefix");
  RangeQuery q = Query(1700000000500, 1700000060000, 250);
  q.query = R"(DCGM_FI_DEV_POWER_USAGE{Hostname="node 1"})";
  const auto body = api->QueryRange(q);
  ASSERT_TRUE(body.ok()) << body.error().message();
  EXPECT_EQ(*body, R"({"status":"success","data":{"resultType":"matrix","result":[]}})");
  const std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], (std::map<std::string, std::string>{{"query", q.query},
                                                          {"start", "1700000000.500"},
                                                          {"end", "1700000060"},
                                                          {"step", "0.250"}}));
  EXPECT_EQ(tokens[0], "Bearer s3cret");
}

TEST(PromHttp, PrometheusErrorsComeThroughOtherStatusesAndNoServerAreErrors) {
  std::atomic<int> status{400};
  const std::string refusal =
      R"json({"status":"error","errorType":"bad_data","error":"exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)"})json";
  LocalServer server([&](const httplib::Request&, httplib::Response& res) {
    res.status = status.load();
    res.set_content(refusal, "application/json");
  });
  HttpOptions options;
  options.timeout_s = 5.0;
  auto api = MakeHttpApi({"127.0.0.1", server.port(), "/prefix"}, options);
  const RangeQuery q = Query(kT0Ms, kT0Ms + 1000, 500);
  const auto body = api->QueryRange(q);
  ASSERT_TRUE(body.ok()) << body.error().message();
  EXPECT_EQ(*body, refusal);
  status = 502;
  const auto bad_gateway = api->QueryRange(q);
  ASSERT_FALSE(bad_gateway.ok());
  EXPECT_EQ(bad_gateway.error().kind(), ErrorKind::kIo);
  EXPECT_THAT(bad_gateway.error().message(), HasSubstr("HTTP 502"));

  // Nothing listens on the port of a server that has gone.
  int gone_port = 0;
  {
    LocalServer gone([](const httplib::Request&, httplib::Response&) {});
    gone_port = gone.port();
  }
  auto nobody = MakeHttpApi({"127.0.0.1", gone_port, ""}, options);
  const auto refused = nobody->QueryRange(q);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind(), ErrorKind::kIo);
  EXPECT_THAT(refused.error().message(), HasSubstr("cannot query"));
}

TEST(PromHttp, TheTimeoutIsTheWholeQuerysNotEachReads) {
  // Before: a byte every 50 ms kept a query with a 0.5 s timeout waiting for as long as the
  // server went on.
  test_support::TricklingServer server;
  ASSERT_GT(server.port(), 0);
  HttpOptions options;
  options.timeout_s = 0.5;
  auto api = MakeHttpApi({"127.0.0.1", server.port(), ""}, options);
  const auto body = api->QueryRange(Query(kT0Ms, kT0Ms + 1000, 500));
  ASSERT_FALSE(body.ok());
  EXPECT_EQ(body.error().kind(), ErrorKind::kIo);
  EXPECT_THAT(body.error().message(), HasSubstr("no whole answer within 0.5 s"));
}

}  // namespace
}  // namespace headroom::prom
