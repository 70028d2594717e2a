#include "trace/writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "trace/meta.h"
#include "trace/reader.h"

namespace headroom::trace {
namespace {

namespace fs = std::filesystem;

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(TraceWriter, WritesTheLongFormatAndReadsBackExactly) {
  const fs::path dir = fs::temp_directory_path() / "headroom_writer_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "t.csv").string();
  std::bitset<kFieldCount> fields;
  fields.set(FieldIndex(Field::kTokens));
  auto writer = TraceWriter::Open(path, fields, /*with_phase=*/true);
  ASSERT_TRUE(writer.ok());
  TraceRow row;
  row.t_s = 0.1 + 0.2;  // 0.30000000000000004: must survive the round trip
  row.gpu = 3;
  row.power_w = 123.456;
  row.phase = "rollout";
  row.fields[FieldIndex(Field::kTokens)] = 17;
  writer->Write(row);
  row.t_s = 1.0;
  row.fields[FieldIndex(Field::kTokens)] = std::numeric_limits<double>::quiet_NaN();
  writer->Write(row);
  EXPECT_FALSE(fs::exists(path));  // nothing visible before Commit
  TraceMeta meta;
  meta.nameplate_w = 400;
  ASSERT_TRUE(writer->Commit(meta).ok());

  EXPECT_EQ(Slurp(path),
            "t_s,gpu,power_w,phase,tokens\n"
            "0.30000000000000004,3,123.456,rollout,17\n"
            "1,3,123.456,rollout,\n");
  auto loaded = LoadMetaFor(path, nullptr);
  ASSERT_TRUE(loaded.ok() && loaded->has_value());
  EXPECT_EQ((*loaded)->nameplate_w, 400.0);

  CollectingSink sink;
  auto summary = ReadTraceFile(path, {}, sink);
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ(sink.series()[0].t_s[0], 0.1 + 0.2);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace headroom::trace
