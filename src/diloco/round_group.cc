#include "diloco/round_group.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <set>

namespace headroom::diloco {

using nlohmann::json;

std::string RunPrefix(const std::string& run) { return "/headroom-diloco/" + run + "/"; }

std::string RoundKey(int round) { return fmt::format("{:08d}", round); }

Result<std::vector<Member>> LiveMembers(coord::Store& store, const std::string& prefix) {
  auto r = store.Get(prefix + "members/", true);
  if (!r) return Error::Io("members: " + r.error().message());
  std::vector<Member> out;
  for (const auto& kv : r->kvs) {
    Member m;
    m.id = kv.key.substr(kv.key.rfind('/') + 1);
    auto j = json::parse(kv.value, nullptr, false);
    if (j.is_discarded() || !j.contains("joined_round") || !j["joined_round"].is_number_integer()) {
      continue;  // not a member record: ignored, never trusted in part
    }
    m.joined_round = j["joined_round"].get<int>();
    out.push_back(m);
  }
  return out;
}

Status PublishMember(const RunMember& me, const std::string& name, int pid, int joined_round) {
  json m = {{"name", name}, {"pid", pid}, {"joined_round", joined_round}};
  auto r = me.store->Put(me.prefix + "members/" + me.id, m.dump(), me.lease);
  if (!r) return Error::Io("member: " + r.error().message());
  return OkStatus();
}

Status CheckConfig(coord::Store& store, const std::string& prefix, const std::string& run,
                   const std::string& config_json) {
  coord::TxnRequest t;
  t.compare.push_back(
      coord::Compare::CreateRevision(prefix + "config", coord::Compare::Result::kEqual, 0));
  t.success.push_back(coord::Op::Put(prefix + "config", config_json));
  t.failure.push_back(coord::Op::Get(prefix + "config"));
  auto r = store.Txn(t);
  if (!r) return Error::Io("config: " + r.error().message());
  if (r->succeeded) return OkStatus();
  if (r->responses.empty() || r->responses[0].empty()) return Error::Io("config: unreadable");
  auto theirs = json::parse(r->responses[0][0].value, nullptr, false);
  if (theirs != json::parse(config_json)) {
    return Error::Usage("run '" + run + "' has other settings in the store: " +
                        r->responses[0][0].value + "; mine: " + config_json);
  }
  return OkStatus();
}

Result<bool> RunStarted(coord::Store& store, const std::string& prefix) {
  auto r = store.Get(prefix + "rounds/", true);
  if (!r) return Error::Io("rounds: " + r.error().message());
  for (const auto& kv : r->kvs) {
    if (kv.key.ends_with("/agreed")) return true;
  }
  return false;
}

Result<std::vector<std::string>> CloseGroup(const RunMember& me, int round, int attempt,
                                            const std::vector<std::string>& candidates,
                                            double deadline_s) {
  coord::Store& store = *me.store;
  const std::string base = me.prefix + "rounds/" + RoundKey(round) + "/" + std::to_string(attempt);
  if (auto p = store.Put(base + "/arrive/" + me.id, "{}", me.lease); !p) {
    return Error::Io("arrive: " + p.error().message());
  }
  const double arrived = me.now_s();
  while (true) {
    auto g = store.Get(base + "/group");
    if (!g) return Error::Io("group: " + g.error().message());
    if (!g->kvs.empty()) {
      auto j = json::parse(g->kvs[0].value, nullptr, false);
      if (j.is_discarded() || !j.contains("members")) return Error::Io("group: unreadable");
      return j["members"].get<std::vector<std::string>>();
    }
    auto a = store.Get(base + "/arrive/", true);
    if (!a) return Error::Io("arrivals: " + a.error().message());
    std::set<std::string> in;
    for (const auto& kv : a->kvs) in.insert(kv.key.substr(kv.key.rfind('/') + 1));
    auto live = LiveMembers(store, me.prefix);
    if (!live) return live.error();
    std::set<std::string> alive;
    for (const auto& m : *live) alive.insert(m.id);
    bool all = true;
    for (const auto& c : candidates) {
      if (alive.count(c) && !in.count(c)) all = false;
    }
    if (all || me.now_s() - arrived > deadline_s) {
      std::vector<std::string> members(in.begin(), in.end());  // sorted: the ranks
      coord::TxnRequest t;
      t.compare.push_back(
          coord::Compare::CreateRevision(base + "/group", coord::Compare::Result::kEqual, 0));
      t.success.push_back(coord::Op::Put(base + "/group", json{{"members", members}}.dump()));
      if (auto r = store.Txn(t); !r) return Error::Io("close group: " + r.error().message());
      continue;  // read back whichever group won
    }
    if (auto s = me.pause(); !s) return s.error();
  }
}

HashVerdict JudgeHashes(const std::vector<std::string>& group,
                        const std::map<std::string, std::string>& hashes, const std::string& mine,
                        int my_rank) {
  HashVerdict v;
  std::map<std::string, int> votes;
  for (const auto& g : group) {
    if (auto h = hashes.find(g); h != hashes.end()) ++votes[h->second];
  }
  int best = 0;
  for (const auto& g : group) {  // rank order: a tie goes to the lowest rank's hash
    auto h = hashes.find(g);
    if (h == hashes.end()) continue;
    const int n = votes[h->second];
    if (n > best) {
      best = n;
      v.majority = h->second;
    }
  }
  if (votes.size() > 1) {
    v.agreed = false;
    for (const auto& g : group) {
      if (auto h = hashes.find(g); h != hashes.end() && h->second != v.majority) ++v.disagreeing;
    }
  }
  v.evicted = mine != v.majority;
  if (!v.evicted) {
    for (int i = 0; i < static_cast<int>(group.size()); ++i) {
      auto h = hashes.find(group[static_cast<size_t>(i)]);
      if (h != hashes.end() && h->second == v.majority) {
        v.donor = i == my_rank;
        break;
      }
    }
  }
  return v;
}

Result<HashVerdict> ExchangeHashes(const RunMember& me, int round,
                                   const std::vector<std::string>& group, int my_rank,
                                   const std::string& mine, double timeout_s) {
  coord::Store& store = *me.store;
  const std::string base = me.prefix + "rounds/" + RoundKey(round) + "/hash/";
  // Not leased: the run's record of who held which model stays after its members have gone
  // (ReadRunSummary and the auditors read it), and a member still judging a round never finds
  // the hash of one that has finished the run gone.
  if (auto p = store.Put(base + me.id, mine, 0); !p)
    return Error::Io("hash: " + p.error().message());
  const double until = me.now_s() + timeout_s;
  std::map<std::string, std::string> hashes;
  while (true) {
    auto r = store.Get(base, true);
    if (!r) return Error::Io("hashes: " + r.error().message());
    hashes.clear();
    for (const auto& kv : r->kvs) hashes[kv.key.substr(kv.key.rfind('/') + 1)] = kv.value;
    bool all = true;
    for (const auto& g : group) all = all && hashes.count(g);
    if (all || me.now_s() > until) break;
    if (auto s = me.pause(); !s) return s.error();
  }
  return JudgeHashes(group, hashes, mine, my_rank);
}

}  // namespace headroom::diloco
