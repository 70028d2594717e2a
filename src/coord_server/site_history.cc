#include "coord_server/site_history.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <nlohmann/json.hpp>

namespace headroom::coord_server {

namespace {

constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

double Or(const std::optional<double>& v) { return v ? *v : kNone; }
std::optional<double> Opt(double v) {
  return std::isnan(v) ? std::nullopt : std::optional<double>(v);
}

// A number as JSON: the shortest form that reads back the same, null for NaN (and for an
// infinity, which JSON has no word for).
template <class T>
void AppendNumber(std::string& out, T v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  fmt::format_to(std::back_inserter(out), "{}", v);
}

void AppendPoint(std::string& out, const StoredSitePoint& p) {
  out += "{\"unix_s\":";
  AppendNumber(out, p.unix_s);
  out += ",\"role\":";
  out += nlohmann::json(p.role).dump();
  fmt::format_to(std::back_inserter(out), ",\"term\":{}", p.term);
  const std::pair<const char*, double> site[] = {
      {",\"site_budget_w\":", p.site_budget_w},
      {",\"target_site_budget_w\":", p.target_site_budget_w},
      {",\"reserve_w\":", p.reserve_w},
      {",\"held_w\":", p.held_w},
      {",\"power_w\":", p.power_w}};
  for (const auto& [key, v] : site) {
    out += key;
    AppendNumber(out, v);
  }
  out += ",\"jobs\":{";
  const SiteHistoryJobSet& jobs = *p.jobs;
  for (size_t i = 0; i < jobs.keys.size(); ++i) {
    if (i > 0) out += ',';
    out += jobs.keys[i];
    out += "{\"grant_w\":";
    AppendNumber(out, p.values[2 * i]);
    out += ",\"power_w\":";
    AppendNumber(out, p.values[2 * i + 1]);
    out += '}';
  }
  out += "}}";
}

}  // namespace

SiteHistoryPoint PointOf(const coord::CoordinatorStatus& status, double unix_s) {
  SiteHistoryPoint p;
  p.unix_s = unix_s;
  p.role = status.role;
  p.term = status.term;
  const bool leading = status.role == "leader" && status.ledger.has_value();
  if (leading) {
    const coord::Ledger& l = *status.ledger;
    p.site_budget_w = l.site_budget_w;
    p.target_site_budget_w = l.target_site_budget_w;
    p.reserve_w = l.reserve_w;
    p.held_w = l.HeldW();
    for (const auto& [job, lj] : l.jobs) p.jobs[job].grant_w = lj.grant_w;
    for (const auto& [job, sb] : l.standby) p.jobs.try_emplace(job);
  }
  for (const auto& [job, m] : status.members) {
    if (!std::isfinite(m.power_w)) continue;
    p.jobs[job].power_w = m.power_w;
    p.power_w = p.power_w.value_or(0.0) + m.power_w;
  }
  return p;
}

SiteHistoryPoint Decode(const StoredSitePoint& p) {
  SiteHistoryPoint d;
  d.unix_s = p.unix_s;
  d.role = p.role;
  d.term = p.term;
  d.site_budget_w = Opt(p.site_budget_w);
  d.target_site_budget_w = Opt(p.target_site_budget_w);
  d.reserve_w = Opt(p.reserve_w);
  d.held_w = Opt(p.held_w);
  d.power_w = Opt(p.power_w);
  for (size_t i = 0; i < p.jobs->names.size(); ++i) {
    SiteHistoryJob& j = d.jobs[p.jobs->names[i]];
    j.grant_w = Opt(p.values[2 * i]);
    j.power_w = Opt(p.values[2 * i + 1]);
  }
  return d;
}

SiteHistory::SiteHistory(double keep_s, double period_s, size_t max_job_values)
    : capacity_(std::min(kMaxPoints, static_cast<size_t>(std::ceil(keep_s / period_s)))),
      max_job_values_(max_job_values) {
  capacity_ = std::max<size_t>(capacity_, 1);
}

void SiteHistory::Add(const SiteHistoryPoint& point) {
  auto p = std::make_shared<StoredSitePoint>();
  p->unix_s = point.unix_s;
  if (!points_.empty() && !(p->unix_s > points_.back()->unix_s)) {
    p->unix_s = std::nextafter(points_.back()->unix_s, std::numeric_limits<double>::infinity());
  }
  p->term = point.term;
  p->role = point.role;
  p->site_budget_w = Or(point.site_budget_w);
  p->target_site_budget_w = Or(point.target_site_budget_w);
  p->reserve_w = Or(point.reserve_w);
  p->held_w = Or(point.held_w);
  p->power_w = Or(point.power_w);
  // The same jobs as the point before (the common case): its set, shared.
  const SiteHistoryJobSet* before = points_.empty() ? nullptr : points_.back()->jobs.get();
  bool same = before != nullptr && before->names.size() == point.jobs.size();
  if (same) {
    size_t i = 0;
    for (const auto& [name, job] : point.jobs) {
      if (before->names[i++] != name) {
        same = false;
        break;
      }
    }
  }
  if (same) {
    p->jobs = points_.back()->jobs;
  } else {
    auto set = std::make_shared<SiteHistoryJobSet>();
    set->names.reserve(point.jobs.size());
    set->keys.reserve(point.jobs.size());
    for (const auto& [name, job] : point.jobs) {
      set->names.push_back(name);
      set->keys.push_back(nlohmann::json(name).dump() + ":");
    }
    p->jobs = std::move(set);
  }
  p->values.reserve(2 * point.jobs.size());
  for (const auto& [name, job] : point.jobs) {
    p->values.push_back(static_cast<float>(Or(job.grant_w)));
    p->values.push_back(static_cast<float>(Or(job.power_w)));
  }
  values_ += p->values.size();
  points_.push_back(std::move(p));
  while (points_.size() > capacity_ || (values_ > max_job_values_ && points_.size() > 1)) {
    values_ -= points_.front()->values.size();
    points_.pop_front();
  }
}

std::vector<std::shared_ptr<const StoredSitePoint>> SiteHistory::After(double after_unix_s,
                                                                       size_t limit) const {
  auto first = std::upper_bound(
      points_.begin(), points_.end(), after_unix_s,
      [](double t, const std::shared_ptr<const StoredSitePoint>& p) { return t < p->unix_s; });
  const auto n = std::min<size_t>(limit, static_cast<size_t>(points_.end() - first));
  return {first, first + static_cast<std::ptrdiff_t>(n)};
}

std::vector<SiteHistoryPoint> SiteHistory::AfterDecoded(double after_unix_s) const {
  std::vector<SiteHistoryPoint> out;
  for (const auto& p : After(after_unix_s, points_.size())) out.push_back(Decode(*p));
  return out;
}

std::string SiteHistoryPageJson(const std::vector<std::shared_ptr<const StoredSitePoint>>& points,
                                const SiteHistoryQuery& query, double period_s) {
  std::string out = "{\"period_s\":";
  AppendNumber(out, period_s);
  out += ",\"points\":[";
  size_t given = 0;
  std::string one;
  const size_t n = std::min(points.size(), query.limit);
  for (; given < n; ++given) {
    one.clear();
    AppendPoint(one, *points[given]);
    // The first always (an answer moves the reader on), then while within the cap.
    if (given > 0 && out.size() + 1 + one.size() > query.max_bytes) break;
    if (given > 0) out += ',';
    out += one;
  }
  const bool more = given < points.size();
  out += "],\"more\":";
  out += more ? "true" : "false";
  out += ",\"next_after\":";
  if (more && given > 0) {
    AppendNumber(out, points[given - 1]->unix_s);
  } else {
    out += "null";
  }
  out += "}\n";
  return out;
}

}  // namespace headroom::coord_server
