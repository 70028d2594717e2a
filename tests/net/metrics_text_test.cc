// The /metrics text both daemons write (net/metrics_text.h): families, samples with and without
// a label, values as the exposition format wants them, and escaping done once.
#include "net/metrics_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace headroom::net {
namespace {

TEST(MetricsText, FamiliesAndSamples) {
  MetricsText w("# a first line\n");
  w.Family("headroom_x_watts", "gauge", "The x.");
  w.Sample("headroom_x_watts", 312.5);
  w.Sample("headroom_x_watts", "gpu", "1", 300.0);
  w.Counter("headroom_y_total", "Ys.", uint64_t{12345678901234567});
  w.Gauge("headroom_z", "Z.", 0.1);
  EXPECT_EQ(w.text(),
            "# a first line\n"
            "# HELP headroom_x_watts The x.\n# TYPE headroom_x_watts gauge\n"
            "headroom_x_watts 312.5\n"
            "headroom_x_watts{gpu=\"1\"} 300\n"
            "# HELP headroom_y_total Ys.\n# TYPE headroom_y_total counter\n"
            "headroom_y_total 12345678901234567\n"  // an integer count stays exact
            "# HELP headroom_z Z.\n# TYPE headroom_z gauge\nheadroom_z 0.1\n");
}

TEST(MetricsText, ValuesAsTheFormatWantsThem) {
  EXPECT_EQ(SampleValue(std::nan("")), "NaN");
  EXPECT_EQ(SampleValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(SampleValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(SampleValue(1.0 / 3.0), "0.3333333333333333");  // reads back the same double
  EXPECT_EQ(SampleValue(5.0), "5");
}

TEST(MetricsText, LabelValuesAndHelpAreEscaped) {
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  MetricsText w;
  w.Family("m", "gauge", "a \\ and\na newline");
  w.Sample("m", "job", "we\"ird\\job\n", 3.0);
  EXPECT_EQ(w.text(),
            "# HELP m a \\\\ and\\na newline\n# TYPE m gauge\n"
            "m{job=\"we\\\"ird\\\\job\\n\"} 3\n");
}

}  // namespace
}  // namespace headroom::net
