#include "diloco_core/scatter.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

namespace headroom::diloco {
namespace {

// One reason byte per sender in an owner's mean frame.
enum Reason : std::uint8_t { kAccepted = 0, kHmac = 1, kMalformed = 2, kNonFinite = 3 };

const char* ReasonName(std::uint8_t r) {
  switch (r) {
    case kHmac:
      return "hmac";
    case kNonFinite:
      return "non-finite";
    default:
      return "malformed";
  }
}

std::uint8_t ReasonOf(const std::string& message) {
  if (message.starts_with("hmac")) return kHmac;
  if (message.starts_with("non-finite")) return kNonFinite;
  return kMalformed;
}

// Chunk j of `values` ([j * per, (j + 1) * per) of them, zeros past the end).
std::vector<float> Slice(std::span<const float> values, std::size_t per, std::size_t j) {
  std::vector<float> out(per, 0.0f);
  const std::size_t from = std::min(values.size(), j * per);
  const std::size_t to = std::min(values.size(), from + per);
  std::copy(values.begin() + static_cast<std::ptrdiff_t>(from),
            values.begin() + static_cast<std::ptrdiff_t>(to), out.begin());
  return out;
}

}  // namespace

Result<Aggregation> ParseAggregation(const std::string& name) {
  if (name == "trimmed-mean") return Aggregation::kTrimmedMean;
  if (name == "mean") return Aggregation::kMean;
  return Error::Usage("--aggregate: '" + name + "' is not trimmed-mean or mean");
}

const char* AggregationName(Aggregation a) {
  return a == Aggregation::kMean ? "mean" : "trimmed-mean";
}

std::size_t ChunkValues(std::size_t count, int k, std::uint32_t block) {
  const std::size_t blocks = std::max<std::size_t>(1, (count + block - 1) / block);
  const auto kk = static_cast<std::size_t>(std::max(1, k));
  return (blocks + kk - 1) / kk * block;
}

std::size_t ChunkFrameBytes(Codec codec, std::size_t count, int k) {
  return FrameBytes(codec, ChunkValues(count, k));
}

std::size_t MeanFrameBytes(Codec codec, std::size_t count, int k) {
  return ChunkFrameBytes(codec, count, k) + static_cast<std::size_t>(k);
}

std::vector<std::uint8_t> SealChunks(const FrameId& id, Codec codec, std::span<const float> delta,
                                     std::vector<float>& error, std::span<const std::uint8_t> key,
                                     int k) {
  const std::size_t per = ChunkValues(delta.size(), k);
  if (error.size() != delta.size()) error.assign(delta.size(), 0.0f);
  std::vector<std::uint8_t> out;
  out.reserve(static_cast<std::size_t>(k) * ChunkFrameBytes(codec, delta.size(), k));
  for (int j = 0; j < k; ++j) {
    const auto ju = static_cast<std::size_t>(j);
    std::vector<float> values = Slice(delta, per, ju);
    std::vector<float> err = Slice(error, per, ju);
    const auto payload = Encode(codec, values, err);
    for (std::size_t i = 0; i < per && ju * per + i < error.size(); ++i) {
      error[ju * per + i] = err[i];
    }
    FrameId chunk = id;
    chunk.part = static_cast<std::uint16_t>(j);
    const auto frame = SealFrame(chunk, codec, payload, key);
    out.insert(out.end(), frame.begin(), frame.end());
  }
  return out;
}

std::vector<std::uint8_t> ReduceChunk(const std::vector<std::vector<std::uint8_t>>& frames,
                                      std::uint64_t round,
                                      const std::vector<std::uint64_t>& members, Codec codec,
                                      std::size_t count, std::span<const std::uint8_t> key,
                                      std::span<const std::uint8_t> seal_key, int owner) {
  const int k = static_cast<int>(members.size());
  const std::size_t per = ChunkValues(count, k);
  std::vector<std::uint8_t> reasons(static_cast<std::size_t>(k), kMalformed);
  std::vector<double> sum(per, 0.0);
  int accepted = 0;
  std::vector<float> v;
  for (int i = 0; i < k && i < static_cast<int>(frames.size()); ++i) {
    const auto iu = static_cast<std::size_t>(i);
    const FrameId expected{static_cast<std::uint32_t>(i), round, members[iu],
                           static_cast<std::uint16_t>(owner)};
    auto payload = OpenFrame(frames[iu], expected, codec, key);
    if (!payload) {
      reasons[iu] = ReasonOf(payload.error().message());
      continue;
    }
    if (auto st = Decode(codec, *payload, per, v); !st) {
      reasons[iu] = ReasonOf(st.error().message());
      continue;
    }
    if (!std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); })) {
      reasons[iu] = kNonFinite;
      continue;
    }
    for (std::size_t j = 0; j < per; ++j) sum[j] += v[j];
    reasons[iu] = kAccepted;
    ++accepted;
  }
  std::vector<float> mean(per, 0.0f);
  for (std::size_t j = 0; accepted > 0 && j < per; ++j) {
    mean[j] = static_cast<float>(sum[j] / accepted);
  }
  std::vector<float> discarded;  // the owner keeps no error feedback of the mean
  std::vector<std::uint8_t> payload = reasons;
  const auto encoded = Encode(codec, mean, discarded);
  payload.insert(payload.end(), encoded.begin(), encoded.end());
  const auto ou = static_cast<std::size_t>(owner);
  return SealFrame({static_cast<std::uint32_t>(owner), round, members[ou],
                    static_cast<std::uint16_t>(kMeanPart | owner)},
                   codec, payload, seal_key);
}

Result<Aggregate> GatherMeans(const std::vector<std::vector<std::uint8_t>>& means,
                              std::uint64_t round, const std::vector<std::uint64_t>& members,
                              Codec codec, std::size_t count, std::span<const std::uint8_t> key) {
  const int k = static_cast<int>(members.size());
  if (static_cast<int>(means.size()) != k) {
    return Error::Input("aggregate: " + std::to_string(means.size()) + " mean frames for " +
                        std::to_string(k) + " members");
  }
  const std::size_t per = ChunkValues(count, k);
  const auto ku = static_cast<std::size_t>(k);
  Aggregate out;
  out.mean.assign(count, 0.0f);
  std::vector<std::string> why(ku);  // empty: accepted by every owner so far
  std::vector<float> v;
  for (std::size_t j = 0; j < ku; ++j) {
    const FrameId expected{static_cast<std::uint32_t>(j), round, members[j],
                           static_cast<std::uint16_t>(kMeanPart | j)};
    auto payload = OpenFrame(means[j], expected, codec, key);
    Status decoded =
        payload ? (payload->size() < ku ? Status(Error::Input("malformed: a mean frame too short"))
                                        : Decode(codec, payload->subspan(ku), per, v))
                : Status(payload.error());
    if (decoded && !std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); })) {
      decoded = Error::Input("non-finite: a value of the mean is NaN or infinite");
    }
    if (!decoded) {
      // This chunk takes no update this round; its owner is not accepted.
      const std::string& m = decoded.error().message();
      why[j] =
          std::string(ReasonName(ReasonOf(m))) + "|chunk " + std::to_string(j) + "'s mean: " + m;
      continue;
    }
    for (std::size_t i = 0; i < ku; ++i) {
      const std::uint8_t r = (*payload)[i];
      if (r != kAccepted && why[i].empty()) {
        why[i] = std::string(ReasonName(r)) + "|left out of chunk " + std::to_string(j) +
                 " by its owner (" + ReasonName(r) + ")";
      }
    }
    for (std::size_t i = 0; i < per && j * per + i < count; ++i) out.mean[j * per + i] = v[i];
  }
  for (std::size_t i = 0; i < ku; ++i) {
    if (why[i].empty()) {
      out.accepted.push_back(static_cast<std::uint32_t>(i));
      continue;
    }
    const auto bar = why[i].find('|');
    out.rejected.push_back(
        {static_cast<std::uint32_t>(i), why[i].substr(0, bar), why[i].substr(bar + 1)});
  }
  if (out.accepted.empty()) return Error::Input("aggregate: no contribution accepted this round");
  return out;
}

}  // namespace headroom::diloco
