// The run's loss curve and totals as the store has them (worker.h, ReadRunSummary).
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "diloco/round_group.h"
#include "diloco/worker.h"

namespace headroom::diloco {

using nlohmann::json;

Result<RunSummary> ReadRunSummary(coord::Store& store, const std::string& run) {
  auto r = store.Get(RunPrefix(run) + "rounds/", true);
  if (!r) return Error::Io("rounds: " + r.error().message());
  RunSummary s;
  std::vector<std::string> last;
  for (const auto& kv : r->kvs) {
    if (!kv.key.ends_with("/agreed")) continue;
    auto j = json::parse(kv.value, nullptr, false);
    if (j.is_discarded()) continue;
    ++s.rounds;
    s.rejected += j.value("rejected", 0);
    s.tokens = std::max(s.tokens, j.value("tokens", std::uint64_t{0}));
    auto members = j.value("members", std::vector<std::string>{});
    if (!last.empty() && members != last) ++s.membership_changes;
    last = members;
    if (j.contains("val_loss")) {
      s.loss_curve.push_back(
          {j.value("tokens", std::uint64_t{0}), j["val_loss"].get<double>(), j.value("round", -1)});
    }
  }
  // Every round's hashes agreed: each hash under rounds/<r>/hash/ equals that round's agreed one.
  std::map<std::string, std::string> agreed;
  for (const auto& kv : r->kvs) {
    if (kv.key.ends_with("/agreed")) {
      auto j = json::parse(kv.value, nullptr, false);
      if (!j.is_discarded()) agreed[kv.key.substr(0, kv.key.size() - 6)] = j.value("hash", "");
    }
  }
  for (const auto& kv : r->kvs) {
    const auto at = kv.key.find("/hash/");
    if (at == std::string::npos) continue;
    const std::string round = kv.key.substr(0, at + 1);
    if (agreed.count(round) && agreed[round] != kv.value) {
      s.hashes_agreed = false;
      ++s.hash_evictions;
    }
  }
  return s;
}

}  // namespace headroom::diloco
