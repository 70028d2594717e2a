#include "diloco/exchange.h"

namespace headroom::diloco {

Result<std::optional<Aggregate>> Exchange(Communicator& comm, const ExchangeSpec& spec,
                                          std::span<const float> delta, std::vector<float>& error,
                                          std::string* why) {
  const auto me = static_cast<std::uint32_t>(spec.rank);
  const FrameId id{me, spec.round, spec.members[me]};
  Result<Aggregate> agg = Error::Input("aggregate: nothing exchanged");
  if (spec.aggregate == Aggregation::kMean) {
    const int k = comm.size();
    const auto chunks = SealChunks(id, spec.codec, delta, error, spec.key, k);
    auto mine = comm.AllToAll(chunks, chunks.size() / static_cast<std::size_t>(k));
    if (!mine) {
      *why = mine.error().message();
      return std::optional<Aggregate>();
    }
    const auto mean = ReduceChunk(*mine, spec.round, spec.members, spec.codec, delta.size(),
                                  spec.run_key, spec.key, spec.rank);
    auto means = comm.AllGather(mean);
    if (!means) {
      *why = means.error().message();
      return std::optional<Aggregate>();
    }
    agg = GatherMeans(*means, spec.round, spec.members, spec.codec, delta.size(), spec.run_key);
  } else {
    const auto frame = SealFrame(id, spec.codec, Encode(spec.codec, delta, error), spec.key);
    auto frames = comm.AllGather(frame);
    if (!frames) {
      *why = frames.error().message();
      return std::optional<Aggregate>();
    }
    agg = AggregateRound(*frames, spec.round, spec.members, spec.codec, delta.size(), spec.run_key,
                         spec.screen);
  }
  if (!agg) return agg.error();
  return std::optional<Aggregate>(std::move(*agg));
}

}  // namespace headroom::diloco
