#include "coord/domain.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "coord/value_allocation.h"

namespace headroom::coord {
namespace {

constexpr double kSameW = 1e-6;
constexpr double kMinDomainFloorW = 1.0;
constexpr size_t kDomainCurvePoints = 16;  // <= kMaxValuePoints

bool SameW(double a, double b) { return std::abs(a - b) <= kSameW; }

const char* StateOf(Acting::State s) {
  switch (s) {
    case Acting::State::kGranted:
      return "granted";
    case Acting::State::kFenced:
      return "fenced";
    case Acting::State::kStandby:
    case Acting::State::kLocal:
      return "standby";
  }
  return "standby";
}

}  // namespace

std::vector<ValuePoint> DomainCurve(const Ledger& ledger,
                                    const std::map<std::string, Member>& members) {
  std::map<std::string, ValueJob> jobs;
  std::map<std::string, std::vector<ValuePoint>> concave;
  bool any_curve = false;
  double floors_w = 0.0, demands_w = 0.0;
  for (const auto& [name, j] : ledger.jobs) {
    if (j.job_class != JobClass::kGuaranteed) continue;
    ValueJob v{j.floor_w, std::max(j.demand_w, j.floor_w), {}};
    if (const auto m = members.find(name); m != members.end()) v.curve = m->second.value_curve;
    any_curve |= !v.curve.empty();
    concave[name] = ConcaveCurve(v);
    floors_w += v.floor_w;
    demands_w += v.demand_w;
    jobs[name] = std::move(v);
  }
  if (!any_curve || !(demands_w > floors_w)) return {};
  // Its budget less its standby and reserve, as its own plan splits it (by value).
  const double off_w = ledger.StandbyW() + std::max(ledger.reserve_w, ledger.TargetReserveW());
  std::vector<ValuePoint> curve;
  for (size_t k = 0; k < kDomainCurvePoints; ++k) {
    const double jobs_w = floors_w + (demands_w - floors_w) * static_cast<double>(k) /
                                         static_cast<double>(kDomainCurvePoints - 1);
    double tokens_per_s = 0.0;
    for (const auto& [name, w] : AllocateByValue(jobs_w, jobs, Fairness::kNone)) {
      tokens_per_s += CurveTokensPerS(concave.at(name), w);
    }
    curve.push_back({jobs_w + off_w, tokens_per_s});
  }
  return curve;
}

Declared DomainSums(const Ledger& ledger, const std::map<std::string, Member>& members,
                    bool ungranted) {
  const double reserve_w = std::max(ledger.reserve_w, ledger.TargetReserveW());
  const double standby_w = ledger.StandbyW();
  Declared d;
  // At least a watt above its reserve: its budget must exceed its reserve (an empty domain).
  d.floor_w = std::max(kMinDomainFloorW, ledger.FloorsW() + standby_w) + reserve_w;
  double demand_w = 0.0;
  for (const auto& [name, j] : ledger.jobs) demand_w += j.demand_w;
  // A job waiting for admission wants its demand, not only the standby it is counted at: the
  // watts the domain asks its site for to admit it.
  for (const auto& [name, sb] : ledger.standby) {
    const auto m = members.find(name);
    const bool waiting = m != members.end() && !sb.duplicate && !ledger.jobs.contains(name);
    demand_w += waiting ? std::max(m->second.demand_w, sb.standby_w) - sb.standby_w : 0.0;
  }
  double nameplate_w = 0.0;
  for (const auto& [name, m] : members) {
    d.gpus += m.gpus;
    nameplate_w += m.nameplate_w;
  }
  d.gpus = std::max(d.gpus, 1);  // a member has at least one (an empty domain: its own)
  // Its whole budget in force is what its jobs may draw until the parent grants this replica.
  if (ungranted) d.floor_w = std::max(d.floor_w, ledger.site_budget_w);
  d.demand_w = std::max(d.floor_w, demand_w + standby_w + reserve_w);
  d.nameplate_w = std::max(d.demand_w, nameplate_w + standby_w + reserve_w);
  d.standby_w = d.floor_w;  // a domain draws no less unheld: its jobs run on
  d.value_curve = DomainCurve(ledger, members);
  return d;
}

std::string DomainHolder(const std::string& domain, const std::string& endpoints) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= endpoints.size()) {
    const size_t comma = std::min(endpoints.find(',', start), endpoints.size());
    if (comma > start) parts.push_back(endpoints.substr(start, comma - start));
    start = comma + 1;
  }
  std::sort(parts.begin(), parts.end());
  std::string joined;
  for (const std::string& p : parts) joined += (joined.empty() ? "" : ",") + p;
  return fmt::format("domain {} on {}", domain, joined);
}

DomainLink::DomainLink(Store& parent, DomainConfig config, std::function<double()> monotonic_s,
                       Logger log)
    : parent_(parent),
      config_(std::move(config)),
      now_s_(std::move(monotonic_s)),
      log_(std::move(log)) {
  status_.etcd = config_.parent_etcd;
  status_.site = config_.parent_site;
}

DomainLink::~DomainLink() = default;

void DomainLink::Join() {
  MemberConfig mc;
  mc.site = config_.parent_site;
  mc.job = config_.domain;
  mc.gpus = 0;
  mc.lease_ttl_s = config_.lease_ttl_s;
  mc.update_s = config_.period_s;
  mc.grant_read_s = 0.0;  // read with every Step: the domain has no watch thread of its own
  mc.domain = true;
  mc.holder = config_.holder;
  member_ = std::make_unique<SiteMember>(parent_, mc, now_s_, log_);
  requested_w_.reset();
  log_.Info(fmt::format("domain '{}': joining site '{}' at {}", config_.domain, config_.parent_site,
                        config_.parent_etcd),
            {{"parent_site", config_.parent_site}});
}

void DomainLink::Leave() {
  if (!member_) return;
  member_->StopWatching();
  member_->Leave();
  member_.reset();
  requested_w_.reset();
  status_.state = "follower";
  status_.job_budget_w = status_.pending_w = 0.0;
  status_.lease = 0;
}

std::optional<double> DomainLink::Step(bool leading, const std::optional<Ledger>& ledger,
                                       const std::map<std::string, Member>& members) {
  if (!leading) {
    if (member_) {
      log_.Info(fmt::format("domain '{}': not leading: leaving site '{}'", config_.domain,
                            config_.parent_site));
    }
    Leave();
    return std::nullopt;
  }
  if (!ledger) return std::nullopt;  // nothing planned yet
  if (!member_) Join();
  const Ledger& l = *ledger;
  // Not granted (never by this replica, or fenced): what its jobs may draw now is declared as
  // its floor, so a parent that counts it afresh (a new lease, its etcd wiped) counts that.
  const bool granted = member_->Peek().state == Acting::State::kGranted;
  const Declared d = DomainSums(l, members, false);
  const Declared declared = granted ? d : DomainSums(l, members, true);
  member_->Declare(declared);
  member_->Step();
  const Acting a = member_->Peek();

  std::optional<double> want;
  if (a.state == Acting::State::kGranted) {
    const double g = a.job_budget_w;
    if (!SameW(l.target_site_budget_w, g) && !(requested_w_ && SameW(*requested_w_, g))) want = g;
    // Down before up: acknowledged once the domain's budget in force, the one its ledger asks
    // for and the last this link requested (written, perhaps not in the ledger read yet: it
    // could still raise the budget in force) all fit under the grant (a higher grant: at once).
    const bool requested_fits = !requested_w_ || *requested_w_ <= g + kSameW;
    member_->ServeIf([&](const Acting& now) {
      return now.state == Acting::State::kGranted && now.term == a.term && now.seq == a.seq &&
             requested_fits && l.site_budget_w <= g + kSameW &&
             l.target_site_budget_w <= g + kSameW;
    });
  } else if (a.state == Acting::State::kFenced) {
    // The agent's fencing rule one level up: the domain to its floor.
    if (l.target_site_budget_w > d.floor_w + kSameW &&
        !(requested_w_ && SameW(*requested_w_, d.floor_w))) {
      want = d.floor_w;
    }
    member_->ServeIf([](const Acting& now) { return now.state == Acting::State::kFenced; });
  }

  const MemberStatus ms = member_->status();
  status_.state = StateOf(a.state);
  status_.reason = a.reason;
  status_.term = a.term;
  status_.seq = a.seq;
  status_.lease = ms.lease;
  status_.job_budget_w = ms.acting == Acting::State::kGranted ? ms.acting_job_budget_w : 0.0;
  const bool served =
      ms.acting == Acting::State::kGranted && SameW(ms.acting_job_budget_w, a.job_budget_w);
  status_.pending_w = a.state == Acting::State::kGranted && !served ? a.job_budget_w : 0.0;
  status_.floor_w = declared.floor_w;
  status_.demand_w = declared.demand_w;
  status_.acks = ms.acks;
  status_.fences = ms.fences;
  status_.puts = ms.puts;
  return want;
}

}  // namespace headroom::coord
