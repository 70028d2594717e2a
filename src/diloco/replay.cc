#include "diloco/replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <memory>

#include "common/text_lines.h"
#include "diloco_core/compress.h"
#include "diloco_core/contribution.h"
#include "diloco_core/outer.h"

namespace headroom::diloco {

Result<std::vector<int>> ParseMembershipSchedule(std::string_view text, std::string_view name) {
  std::vector<int> out;
  bool header = false;
  Status bad = OkStatus();
  const auto parse = [](std::string_view f, int& v) {
    const auto [p, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
    return ec == std::errc() && p == f.data() + f.size();
  };
  ForEachDataLine(text, [&](size_t line_no, std::string_view line) {
    if (!header) {
      if (line != "round,workers") {
        bad =
            Error::Input(fmt::format("{}:{}: expected the header 'round,workers'", name, line_no));
        return false;
      }
      header = true;
      return true;
    }
    const size_t comma = line.find(',');
    int round = -1, workers = -1;
    if (comma == std::string_view::npos || !parse(line.substr(0, comma), round) ||
        round != static_cast<int>(out.size())) {
      bad =
          Error::Input(fmt::format("{}:{}: field 'round': expected {}", name, line_no, out.size()));
      return false;
    }
    if (!parse(line.substr(comma + 1), workers) || workers < 1 || workers > 1000) {
      bad = Error::Input(fmt::format("{}:{}: field 'workers': expected 1 to 1000", name, line_no));
      return false;
    }
    out.push_back(workers);
    return true;
  });
  if (!bad) return bad.error();
  if (out.empty()) return Error::Input(fmt::format("{}: no rounds", name));
  return out;
}

Result<ReplayResult> ReplayRun(const ModelFactory& model, const ReplayOptions& options,
                               const std::function<void(int, int)>& progress) {
  const WorkerOptions& o = options.worker;
  if (options.workers < 1) return Error::Usage("replay: --workers must be 1 or more");
  if (options.members.empty()) return Error::Usage("replay: an empty schedule");
  if (options.worker.aggregate != Aggregation::kTrimmedMean ||
      options.worker.stream_fragments > 1) {
    return Error::Usage("replay: --aggregate mean and --stream-fragments are not replayed");
  }
  const int k_max = options.workers;
  std::vector<std::unique_ptr<Model>> models;
  for (int i = 0; i < k_max; ++i) {
    auto m = model();
    if (!m) return m.error();
    // The stream of a worker named worker-i (as `diloco local` names them).
    (*m)->SetDataStream(NameStream(fmt::format("worker-{}", i)));
    models.push_back(std::move(*m));
  }
  std::vector<float> global;
  models[0]->GetParameters(global);
  const size_t n = global.size();
  std::vector<std::vector<float>> error(static_cast<size_t>(k_max), std::vector<float>(n, 0.0f));
  std::vector<int> held(static_cast<size_t>(k_max), 0);  // the round whose model each holds
  OuterSgd outer(o.outer);
  const std::vector<std::uint8_t> key =
      o.key.empty() ? std::vector<std::uint8_t>(o.run.begin(), o.run.end()) : o.key;
  ReplayResult out;
  const int rounds = static_cast<int>(options.members.size());
  std::vector<float> local(n), delta(n);
  for (int r = 0; r < rounds; ++r) {
    const int k = std::clamp(options.members[static_cast<size_t>(r)], 1, k_max);
    // Joiners first: the run's model and a donor's inner state (the lowest member that trained
    // the last round), before anyone trains this one.
    int donor = -1;
    for (int i = 0; i < k; ++i) {
      if (held[static_cast<size_t>(i)] == r) {
        donor = i;
        break;
      }
    }
    for (int i = 0; i < k; ++i) {
      if (held[static_cast<size_t>(i)] == r || r == 0) continue;
      if (donor >= 0) {
        if (auto st = models[static_cast<size_t>(i)]->SetOptimizerState(
                models[static_cast<size_t>(donor)]->GetOptimizerState());
            !st) {
          return st.error();
        }
      }
      std::fill(error[static_cast<size_t>(i)].begin(), error[static_cast<size_t>(i)].end(), 0.0f);
      ++out.resyncs;
    }
    std::vector<std::vector<std::uint8_t>> frames;
    std::vector<std::uint64_t> ids;
    for (int i = 0; i < k; ++i) {
      Model& m = *models[static_cast<size_t>(i)];
      m.SetParameters(global);
      for (int s = 0; s < o.inner_steps; ++s) m.TrainStep();
      m.GetParameters(local);
      for (size_t p = 0; p < n; ++p) delta[p] = global[p] - local[p];
      const auto payload = Encode(o.codec, delta, error[static_cast<size_t>(i)]);
      ids.push_back(static_cast<std::uint64_t>(i + 1));
      frames.push_back(
          SealFrame({static_cast<std::uint32_t>(i), static_cast<std::uint64_t>(r), ids.back()},
                    o.codec, payload, key));
    }
    auto agg =
        AggregateRound(frames, static_cast<std::uint64_t>(r), ids, o.codec, n, key, o.screen);
    if (!agg) return agg.error();
    outer.Step(global, agg->mean);
    for (int i = 0; i < k; ++i) held[static_cast<size_t>(i)] = r + 1;
    out.tokens += static_cast<std::uint64_t>(agg->accepted.size()) *
                  static_cast<std::uint64_t>(o.inner_steps) * models[0]->tokens_per_step();
    out.rounds = r + 1;
    if ((r + 1) % std::max(1, o.eval_every) == 0 || r + 1 == rounds) {
      models[0]->SetParameters(global);
      out.loss_curve.push_back({out.tokens, models[0]->ValidationLoss()});
    }
    if (progress) progress(r + 1, rounds);
  }
  out.final_val_loss = out.loss_curve.empty() ? 0.0 : out.loss_curve.back().val_loss;
  return out;
}

}  // namespace headroom::diloco
