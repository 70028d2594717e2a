#include "prom/range_query.h"

#include <fast_float/fast_float.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

namespace headroom::prom {
namespace {

bool Digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

int64_t ToInt(std::string_view s) {
  int64_t v = 0;
  for (char c : s) v = v * 10 + (c - '0');
  return v;
}

// Days from 1970-01-01 to year-month-day (proleptic Gregorian; Howard Hinnant's algorithm).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2 ? 1 : 0;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

// "digits[.1-3 digits]" seconds to milliseconds; -1 when it is not that.
// Seconds with at most `max_decimals` decimals (digits beyond the millisecond are dropped: the
// API's own resolution) to milliseconds; -1 when it is not such a number.
int64_t SecondsToMs(std::string_view s, size_t max_decimals = 3) {
  const size_t dot = s.find('.');
  const std::string_view whole = s.substr(0, dot);
  if (!Digits(whole) || whole.size() > 12) return -1;
  int64_t ms = ToInt(whole) * 1000;
  if (dot != std::string_view::npos) {
    std::string_view frac = s.substr(dot + 1);
    if (!Digits(frac) || frac.size() > max_decimals) return -1;
    frac = frac.substr(0, 3);
    int64_t f = ToInt(frac);
    for (size_t k = frac.size(); k < 3; ++k) f *= 10;
    ms += f;
  }
  return ms;
}

std::string LabelText(const std::map<std::string, std::string>& labels) {
  std::string out = "{";
  for (const auto& [k, v] : labels) {
    if (out.size() > 1) out += ",";
    out += fmt::format("{}=\"{}\"", k, v);
  }
  return out + "}";
}

std::string CsvField(const std::string& text) {
  if (text.find_first_of(",\"") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace

Result<int64_t> ParseTimeMs(std::string_view text, std::string_view what) {
  const auto bad = [&] {
    return Error::Usage(fmt::format(
        "{} '{}': give Unix seconds (to the millisecond, e.g. 1764669600.5) or RFC 3339 (e.g. "
        "2026-12-02T10:00:00Z)",
        what, text));
  };
  if (text.find('T') == std::string_view::npos) {
    const int64_t ms = SecondsToMs(text);
    if (ms < 0) return bad();
    return ms;
  }
  // YYYY-MM-DDTHH:MM:SS[.fff](Z|+HH:MM|-HH:MM)
  if (text.size() < 20 || text[4] != '-' || text[7] != '-' || text[10] != 'T' || text[13] != ':' ||
      text[16] != ':') {
    return bad();
  }
  const std::string_view y = text.substr(0, 4), mo = text.substr(5, 2), d = text.substr(8, 2),
                         h = text.substr(11, 2), mi = text.substr(14, 2);
  if (!Digits(y) || !Digits(mo) || !Digits(d) || !Digits(h) || !Digits(mi)) return bad();
  size_t zone = text.find_first_of("Zz+-", 17);
  if (zone == std::string_view::npos) return bad();
  // RFC 3339 allows any number of decimals (Prometheus writes up to nanoseconds).
  const int64_t sec_ms = SecondsToMs(text.substr(17, zone - 17), 9);
  if (sec_ms < 0 || text.substr(17, zone - 17).size() < 2) return bad();
  int64_t offset_min = 0;
  const std::string_view tz = text.substr(zone);
  if (tz == "Z" || tz == "z") {
    offset_min = 0;
  } else if (tz.size() == 6 && tz[3] == ':' && Digits(tz.substr(1, 2)) && Digits(tz.substr(4, 2))) {
    offset_min = ToInt(tz.substr(1, 2)) * 60 + ToInt(tz.substr(4, 2));
    if (tz[0] == '-') offset_min = -offset_min;
  } else {
    return bad();
  }
  const int64_t month = ToInt(mo), day = ToInt(d), hour = ToInt(h), minute = ToInt(mi);
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 ||
      sec_ms >= 61000) {
    return bad();
  }
  const int64_t year = ToInt(y);
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  constexpr int kDaysIn[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (day > kDaysIn[month - 1] + (month == 2 && leap ? 1 : 0)) return bad();
  const int64_t days = DaysFromCivil(year, month, day);
  return ((days * 24 + hour) * 60 + minute - offset_min) * 60000 + sec_ms;
}

Result<std::vector<RangeQuery>> ChunkRange(const RangeQuery& q, int64_t max_points) {
  if (q.query.empty()) return Error::Usage("--query: give the PromQL of GPU power");
  if (q.step_ms <= 0) return Error::Usage("--step: must be at least 1 ms");
  if (q.end_ms < q.start_ms) return Error::Usage("--end: before --start");
  if (max_points < 1) return Error::Usage("points per query: at least 1");
  std::vector<RangeQuery> out;
  const int64_t instants = (q.end_ms - q.start_ms) / q.step_ms + 1;
  for (int64_t first = 0; first < instants; first += max_points) {
    RangeQuery c = q;
    c.start_ms = q.start_ms + first * q.step_ms;
    c.end_ms = q.start_ms + (std::min(instants, first + max_points) - 1) * q.step_ms;
    out.push_back(std::move(c));
  }
  return out;
}

Result<std::vector<Series>> ParseMatrix(std::string_view body, std::string_view name) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Error::Input(fmt::format("{}: not a Prometheus API answer (not a JSON object)", name));
  }
  const auto status = j.find("status");
  if (status == j.end() || !status->is_string()) {
    return Error::Input(fmt::format("{}: no \"status\" in the answer", name));
  }
  if (*status != "success") {
    const auto e = j.find("error");
    return Error::Input(fmt::format(
        "{}: Prometheus says {}: {}", name, j.value("errorType", std::string("error")),
        e != j.end() && e->is_string() ? e->get<std::string>() : std::string("(no message)")));
  }
  const auto data = j.find("data");
  if (data == j.end() || !data->is_object() || !data->contains("resultType") ||
      !(*data)["resultType"].is_string() || !data->contains("result") ||
      !(*data)["result"].is_array()) {
    return Error::Input(fmt::format("{}: \"data\" has no resultType and result", name));
  }
  if ((*data)["resultType"] != "matrix") {
    return Error::Input(fmt::format("{}: result type '{}', not a range query's matrix", name,
                                    (*data)["resultType"].get<std::string>()));
  }
  std::vector<Series> out;
  for (const nlohmann::json& r : (*data)["result"]) {
    Series s;
    if (!r.is_object() || !r.contains("metric") || !r["metric"].is_object() ||
        !r.contains("values") || !r["values"].is_array()) {
      return Error::Input(fmt::format("{}: series {} has no metric and values", name, out.size()));
    }
    for (const auto& [k, v] : r["metric"].items()) {
      if (!v.is_string()) {
        return Error::Input(
            fmt::format("{}: series {}: label '{}' is not a string", name, out.size(), k));
      }
      s.labels[k] = v.get<std::string>();
    }
    for (const nlohmann::json& p : r["values"]) {
      if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_string()) {
        return Error::Input(fmt::format("{}: series {}: a point is not [time, \"value\"]", name,
                                        LabelText(s.labels)));
      }
      const double t_s = p[0].get<double>();
      const std::string& text = p[1].get_ref<const std::string&>();
      double v = 0.0;
      const auto [end, ec] = fast_float::from_chars(text.data(), text.data() + text.size(), v);
      if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v) ||
          !std::isfinite(t_s)) {
        return Error::Input(fmt::format("{}: series {} at {}: value '{}' is not a finite number",
                                        name, LabelText(s.labels), t_s, text));
      }
      // Unix seconds; the bound is the trace reader's (trace::kMaxTimeS) and keeps t_ms exact.
      constexpr double kMaxUnixTimeS = 1e11;
      if (!(t_s >= 0.0 && t_s <= kMaxUnixTimeS)) {
        return Error::Input(fmt::format("{}: series {}: time {} is not Unix seconds in [0, {}]",
                                        name, LabelText(s.labels), t_s, kMaxUnixTimeS));
      }
      const int64_t t_ms = std::llround(t_s * 1000.0);
      if (!s.t_ms.empty() && t_ms <= s.t_ms.back()) {
        return Error::Input(
            fmt::format("{}: series {}: times out of order at {}", name, LabelText(s.labels), t_s));
      }
      s.t_ms.push_back(t_ms);
      s.value.push_back(v);
    }
    out.push_back(std::move(s));
  }
  return out;
}

Status CheckAnswerTimes(const std::vector<Series>& series, const RangeQuery& asked,
                        std::string_view name) {
  for (const Series& s : series) {
    for (const int64_t t_ms : s.t_ms) {
      if (t_ms >= asked.start_ms && t_ms <= asked.end_ms &&
          (t_ms - asked.start_ms) % asked.step_ms == 0) {
        continue;
      }
      return Error::Input(fmt::format(
          "{}: series {}: a sample at {:.3f} s, not an instant asked for (from {:.3f} to {:.3f} "
          "s every {:g} s): the server answered another range",
          name, LabelText(s.labels), static_cast<double>(t_ms) / 1000.0,
          static_cast<double>(asked.start_ms) / 1000.0, static_cast<double>(asked.end_ms) / 1000.0,
          static_cast<double>(asked.step_ms) / 1000.0));
    }
  }
  return OkStatus();
}

void MergeSeries(std::vector<Series>&& chunk, std::vector<Series>* all) {
  // By label set, in O(log n) each: an answer may hold thousands of series.
  using Labels = std::map<std::string, std::string>;
  all->reserve(all->size() + chunk.size());  // before taking addresses: no reallocation after
  std::map<const Labels*, size_t, bool (*)(const Labels*, const Labels*)> index(
      [](const Labels* a, const Labels* b) { return *a < *b; });
  for (size_t i = 0; i < all->size(); ++i) index.emplace(&(*all)[i].labels, i);
  for (Series& s : chunk) {
    const auto it = index.find(&s.labels);
    if (it == index.end()) {
      all->push_back(std::move(s));
      continue;
    }
    Series& into = (*all)[it->second];
    into.t_ms.insert(into.t_ms.end(), s.t_ms.begin(), s.t_ms.end());
    into.value.insert(into.value.end(), s.value.begin(), s.value.end());
  }
}

Result<std::vector<std::string>> SeriesNames(const std::vector<Series>& series,
                                             std::string_view name) {
  const auto host_of = [](const Series& s) -> std::string {
    for (const char* key : {"Hostname", "instance"}) {
      const auto it = s.labels.find(key);
      if (it != s.labels.end()) return it->second;
    }
    return {};
  };
  std::set<std::string> hosts;
  for (const Series& s : series) hosts.insert(host_of(s));
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const Series& s : series) {
    std::string n;
    if (const auto gpu = s.labels.find("gpu"); gpu != s.labels.end()) {
      n = hosts.size() > 1 ? host_of(s) + "/" + gpu->second : gpu->second;
    } else if (const auto uuid = s.labels.find("UUID"); uuid != s.labels.end()) {
      n = uuid->second;
    } else {
      n = LabelText(s.labels);
    }
    if (n.empty() || std::any_of(n.begin(), n.end(), [](char c) {
          return (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f;
        })) {
      return Error::Input(
          fmt::format("{}: series {}: its GPU name is empty or holds a control byte", name,
                      LabelText(s.labels)));
    }
    if (!seen.insert(n).second) {
      return Error::Input(fmt::format(
          "{}: two series are GPU '{}' (labels gpu, Hostname/instance, UUID): narrow the query so "
          "that each GPU is one series",
          name, n));
    }
    names.push_back(std::move(n));
  }
  return names;
}

Result<Trace> ToTrace(const std::vector<Series>& series, int64_t t0_ms, std::string resolution,
                      std::string_view name) {
  auto names = SeriesNames(series, name);
  if (!names) return std::move(names).error();
  Trace out;
  out.t0_ms = t0_ms;
  out.resolution = std::move(resolution);
  out.series = series.size();
  // Time-major, GPUs in the answer's order at each time: as headroom writes a trace.
  std::vector<std::tuple<int64_t, size_t, size_t>> rows;
  for (size_t s = 0; s < series.size(); ++s) {
    for (size_t i = 0; i < series[s].t_ms.size(); ++i) rows.emplace_back(series[s].t_ms[i], s, i);
  }
  if (rows.empty()) {
    return Error::Input(fmt::format("{}: the query answered no samples in the range", name));
  }
  std::sort(rows.begin(), rows.end());
  out.samples = rows.size();
  std::vector<std::string> fields;
  for (const std::string& n : *names) fields.push_back(CsvField(n));
  out.csv.reserve(rows.size() * 24 + 32);
  out.csv += "t_s,gpu,power_w\n";
  for (const auto& [t_ms, s, i] : rows) {
    fmt::format_to(std::back_inserter(out.csv), "{},{},{}\n",
                   static_cast<double>(t_ms - t0_ms) / 1000.0, fields[s], series[s].value[i]);
  }
  return out;
}

}  // namespace headroom::prom
