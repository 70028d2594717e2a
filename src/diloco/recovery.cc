#include "diloco/recovery.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <nlohmann/json.hpp>

#include "diloco_core/digest.h"

namespace headroom::diloco {

std::size_t StateBytes(std::size_t n) { return 32 + 16 * n; }

std::vector<std::uint8_t> EncodeState(const RunState& s) {
  const std::size_t n = s.model.size();
  assert(s.inner.exp_avg.size() == n && s.inner.exp_avg_sq.size() == n);
  assert(s.momentum.empty() || s.momentum.size() == n);
  std::vector<std::uint8_t> blob(StateBytes(n));
  const std::uint64_t head[2] = {static_cast<std::uint64_t>(s.next_round), s.run_tokens};
  std::memcpy(blob.data(), head, 16);
  const std::int64_t steps[2] = {s.inner.schedule_step, s.inner.adam_step};
  std::memcpy(blob.data() + 16, steps, 16);
  std::uint8_t* at = blob.data() + 32;
  std::memcpy(at, s.model.data(), 4 * n);
  if (!s.momentum.empty()) std::memcpy(at + 4 * n, s.momentum.data(), 4 * n);
  std::memcpy(at + 8 * n, s.inner.exp_avg.data(), 4 * n);
  std::memcpy(at + 12 * n, s.inner.exp_avg_sq.data(), 4 * n);
  return blob;
}

Result<RunState> DecodeState(std::span<const std::uint8_t> blob, std::size_t n) {
  if (blob.size() != StateBytes(n)) return Error::Io("state: wrong size");
  RunState s;
  std::uint64_t head[2];
  std::memcpy(head, blob.data(), 16);
  std::int64_t steps[2];
  std::memcpy(steps, blob.data() + 16, 16);
  const std::uint8_t* at = blob.data() + 32;
  s.next_round = static_cast<int>(head[0]);
  s.run_tokens = head[1];
  s.model.resize(n);
  std::memcpy(s.model.data(), at, 4 * n);
  s.momentum.resize(n);
  std::memcpy(s.momentum.data(), at + 4 * n, 4 * n);
  if (std::all_of(s.momentum.begin(), s.momentum.end(), [](float x) { return x == 0; })) {
    s.momentum.clear();
  }
  s.inner.schedule_step = steps[0];
  s.inner.adam_step = steps[1];
  s.inner.exp_avg.resize(n);
  s.inner.exp_avg_sq.resize(n);
  std::memcpy(s.inner.exp_avg.data(), at + 8 * n, 4 * n);
  std::memcpy(s.inner.exp_avg_sq.data(), at + 12 * n, 4 * n);
  return s;
}

using nlohmann::json;

Status ServeJoins(const RunMember& me, int round, std::span<const std::uint8_t> blob,
                  const CommFactory& comm, double timeout_s, Accounting& accounting,
                  TrafficCounters& traffic, const std::function<Status(bool force)>& keep_alive) {
  coord::Store& store = *me.store;
  auto r = store.Get(me.prefix + "joins/", true);
  if (!r) return Error::Io("joins: " + r.error().message());
  for (const auto& kv : r->kvs) {
    const std::string rest = kv.key.substr((me.prefix + "joins/").size());
    if (rest.find('/') != std::string::npos) continue;  // an answer, not a request
    accounting.Enter(Accounting::Phase::kRecover);
    const std::string serve = me.prefix + "joins/" + rest + "/serve";
    const std::string gloo = me.prefix + "joins/" + rest + "/" + RoundKey(round) + "/";
    if (auto p = store.Put(serve, json{{"round", round}, {"prefix", gloo}}.dump()); !p) {
      return Error::Io("serve: " + p.error().message());
    }
    auto c = comm(gloo, 0, 2, timeout_s);
    if (c) {
      std::vector<std::uint8_t> bytes(blob.begin(), blob.end());
      if (auto b = (*c)->Broadcast(bytes, 0); b) {
        accounting.Log(fmt::format("round {}: sent the model to {}", round, rest));
        traffic.bytes_sent += (*c)->traffic().bytes_sent;
      } else {
        accounting.Log(fmt::format("round {}: sending the model to {} failed: {}", round, rest,
                                   b.error().message()));
      }
    } else {
      accounting.Log(
          fmt::format("round {}: {} did not connect: {}", round, rest, c.error().message()));
    }
    (void)store.Delete(kv.key, true);  // served (or gone): it asks again if it still needs to
    if (auto k = keep_alive(true); !k) return k;
  }
  accounting.Enter(Accounting::Phase::kWait);
  return OkStatus();
}

Result<Joined> AwaitDonor(const RunMember& me, int last_round, std::size_t parameters,
                          const CommFactory& comm, double timeout_s, Accounting& accounting,
                          TrafficCounters& traffic,
                          const std::function<Status(bool force)>& keep_alive) {
  coord::Store& store = *me.store;
  const std::string request = me.prefix + "joins/" + me.id;
  while (true) {
    (void)store.Delete(request + "/serve");
    if (auto p = store.Put(request, "{}", me.lease); !p)
      return Error::Io("join: " + p.error().message());
    json serve;
    while (true) {
      auto s = store.Get(request + "/serve");
      if (!s) return Error::Io("join: " + s.error().message());
      if (!s->kvs.empty()) {
        serve = json::parse(s->kvs[0].value, nullptr, false);
        break;
      }
      // The run's last round is done: nothing left to join.
      auto last = store.Get(me.prefix + "rounds/" + RoundKey(last_round) + "/agreed");
      if (!last) return Error::Io("join: " + last.error().message());
      if (!last->kvs.empty()) {
        (void)store.Delete(request, true);
        accounting.Log("join: the run ended before a donor served me");
        Joined j;
        j.ended = true;
        return j;
      }
      if (auto k = me.pause(); !k) return k.error();
    }
    if (serve.is_discarded() || !serve.contains("round") || !serve["round"].is_number_integer() ||
        !serve.contains("prefix") || !serve["prefix"].is_string()) {
      continue;  // not an answer: asked again
    }
    const int round = serve["round"].get<int>();
    if (auto k = keep_alive(true); !k) return k.error();
    auto c = comm(serve["prefix"].get<std::string>(), 1, 2, timeout_s);
    if (!c) {
      accounting.Log("join: " + c.error().message());
      continue;
    }
    std::vector<std::uint8_t> blob(StateBytes(parameters));
    if (auto b = (*c)->Broadcast(blob, 0); !b) {
      accounting.Log("join: " + b.error().message());
      continue;
    }
    traffic.bytes_received += (*c)->traffic().bytes_received;
    auto agreed = store.Get(me.prefix + "rounds/" + RoundKey(round) + "/agreed");
    if (!agreed || agreed->kvs.empty()) continue;
    auto a = json::parse(agreed->kvs[0].value, nullptr, false);
    auto state = DecodeState(blob, parameters);
    if (!state) return state.error();
    const std::string got = Hex(Sha256Floats(state->model));
    if (a.is_discarded() || !a.contains("hash") || !a["hash"].is_string() ||
        a["hash"].get<std::string>() != got) {
      accounting.Log(
          fmt::format("join: the model sent for round {} hashes to {}, not the recorded one", round,
                      got.substr(0, 12)));
      continue;
    }
    Joined j;
    j.round = round;
    j.state = std::move(*state);
    return j;
  }
}

}  // namespace headroom::diloco
