// A domain under a site (docs/SITE.md, "Domains"): a coordinator on its own etcd, one per
// breaker, that is itself a member of its parent site's coordinator. Its leader registers
// under the parent (job = the domain's site name, Member::domain), declares its jobs' sums --
// floor = its jobs' floors + its standby + its reserve, demand and nameplate likewise -- and
// moves its own site budget to the grant it gets. Its value curve is its jobs' curves
// water-filled (DomainCurve), so a parent allocating by value weighs a domain as its jobs. The
// rules one level up:
//   - down before up: a lower grant is acknowledged only once the domain's own budget in force
//     (so the sum of what its jobs hold, and its reserve) fits under it; a higher one at once;
//   - fenced (its parent lease not renewed within TTL - margin): its budget goes to its
//     floor; the parent keeps what it held until it registers again and acknowledges lower
//     (plan.h, rule 1a);
//   - its demand: its admitted jobs' demands, the demand of each job waiting for admission (not
//     only the standby it is counted at: the watts to admit it), its standby and its reserve;
//   - not granted (never by this replica -- it just began leading, or the domain just joined --
//     or fenced): it declares as its floor its whole budget in force (what its jobs may draw
//     now), so a parent that counts it afresh (a new lease, a parent etcd wiped) counts that;
//     never granted, its budget stays as it is until the parent grants.
// Only the leader is a member; a replica that stops leading leaves (its lease revoked). No
// threads, no clock of its own; the parent store is the only I/O.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/log.h"
#include "coord/coordinator.h"
#include "coord/layout.h"
#include "coord/member.h"
#include "coord/store.h"

namespace headroom::coord {

struct DomainConfig {
  std::string parent_site;  // --parent-site: the site this domain is a member of
  std::string parent_etcd;  // --parent-etcd, as the status shows it
  std::string domain;       // this domain's --site: its job name in the parent
  int64_t lease_ttl_s = 3;  // of its parent lease
  double period_s = 1.0;    // the domain coordinator's
  // The same for every replica of this domain (DomainHolder): the site charges a replica
  // registering while another's lease lives on only what it adds (plan.h, rule 1b).
  std::string holder;
};

// The domain's value curve (docs/SITE.md, "Allocation by value"): at budgets from its floors to
// its demands (16 points), the tokens/s its jobs make when those watts are water-filled on their
// curves, as its own plan by value splits them; each budget with its standby and reserve added.
// Empty when none of its jobs publishes a curve.
std::vector<ValuePoint> DomainCurve(const Ledger& ledger,
                                    const std::map<std::string, Member>& members);

// The domain's sums over its ledger (its admitted jobs, its standby, its reserve) and its
// members (GPUs, nameplate): what it declares to its parent; `ungranted`: its floor is its
// whole budget in force.
Declared DomainSums(const Ledger& ledger, const std::map<std::string, Member>& members,
                    bool ungranted);

// "domain NAME on ENDPOINTS": the domain's name and its etcd's endpoints, sorted (its replicas
// name the same etcd, in any order).
std::string DomainHolder(const std::string& domain, const std::string& endpoints);

class DomainLink {
 public:
  // `parent` outlives the link.
  DomainLink(Store& parent, DomainConfig config, std::function<double()> monotonic_s, Logger log);
  ~DomainLink();
  DomainLink(const DomainLink&) = delete;
  DomainLink& operator=(const DomainLink&) = delete;

  // One period, after the domain coordinator's: while `leading`, with the ledger and members it
  // planned on, the parent membership stepped; the domain's site budget to request now
  // (nullopt: none). Not leading: leaves the parent (its lease revoked).
  std::optional<double> Step(bool leading, const std::optional<Ledger>& ledger,
                             const std::map<std::string, Member>& members);
  // The request Step asked for was written (the domain's target), or refused: not asked again
  // until the grant (or the fence) moves.
  void Requested(double site_budget_w) { requested_w_ = site_budget_w; }
  // A clean stop: the parent lease revoked.
  void Leave();

  ParentStatus status() const { return status_; }

 private:
  void Join();

  Store& parent_;
  const DomainConfig config_;
  std::function<double()> now_s_;
  Logger log_;
  std::unique_ptr<SiteMember> member_;  // while leading
  std::optional<double> requested_w_;
  ParentStatus status_;
};

}  // namespace headroom::coord
