#pragma once
// The `mean` aggregate (`--aggregate mean`, docs/DILOCO.md "Aggregation"): the round's
// pseudo-gradients averaged in half the bytes of the screened all-gather, for members that trust
// each other. Each member cuts its pseudo-gradient into k chunks on codec block boundaries (k =
// the group's size; the last chunks padded with zeros to the same length) and seals each as a
// frame (contribution.h; part = the chunk's index). An all-to-all sends chunk j of every member
// to member j -- a reduce-scatter done directly, each chunk quantized once on its way -- and
// member j, the chunk's owner, authenticates and decodes the k frames, leaves out any that fail
// (hmac, malformed, non-finite), averages the rest in rank order (in double), and seals the mean
// (part = kMeanPart | j) after one reason byte per sender. An all-gather of the owners' frames
// gives every member the same bytes, so every member assembles the same mean, bit for bit.
// Per member: (k - 1) chunk frames sent, (k - 1) mean frames: 2 (k - 1) / k of one
// pseudo-gradient, against (k - 1) for the all-gather (half at k = 4).
//
// What it gives up: no norm or direction screen (a chunk's owner sees one chunk of each member,
// and a hostile owner could bias its chunk unseen). What it keeps: every frame authenticates
// under the run's key; a member whose chunk does not (or is not finite) is left out of that
// chunk and of the round's accepted members; an owner whose mean frame does not authenticate
// gives its chunk no update this round (every member sees the same frame and decides alike).
// Pure: no I/O.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "diloco_core/compress.h"
#include "diloco_core/contribution.h"

namespace headroom::diloco {

// How a round's contributions become its pseudo-gradient: screened and trimmed after an
// all-gather (contribution.h, the default), or the plain mean by reduce-scatter (this file).
enum class Aggregation { kTrimmedMean, kMean };
Result<Aggregation> ParseAggregation(const std::string& name);  // "trimmed-mean", "mean"
const char* AggregationName(Aggregation a);

inline constexpr std::uint16_t kMeanPart = 0x8000;

// Values per chunk for `count` values over k members: whole blocks, the same for every chunk.
std::size_t ChunkValues(std::size_t count, int k, std::uint32_t block = kDefaultBlock);
// Bytes of one chunk frame (a sender's) and of one mean frame (an owner's).
std::size_t ChunkFrameBytes(Codec codec, std::size_t count, int k);
std::size_t MeanFrameBytes(Codec codec, std::size_t count, int k);

// My k chunk frames, concatenated (chunk j at j * ChunkFrameBytes); `error` is the error
// feedback of the whole pseudo-gradient (compress.h), each chunk's part updated by its encoding.
// id.part is ignored (each frame carries its chunk's index).
std::vector<std::uint8_t> SealChunks(const FrameId& id, Codec codec, std::span<const float> delta,
                                     std::vector<float>& error, std::span<const std::uint8_t> key,
                                     int k);

// As chunk `owner`'s owner: the k frames the all-to-all brought (frames[i] from rank i),
// authenticated under `key` and averaged; my mean frame, signed with `seal_key` (the run's key
// but for a test's hostile owner).
std::vector<std::uint8_t> ReduceChunk(const std::vector<std::vector<std::uint8_t>>& frames,
                                      std::uint64_t round,
                                      const std::vector<std::uint64_t>& members, Codec codec,
                                      std::size_t count, std::span<const std::uint8_t> key,
                                      std::span<const std::uint8_t> seal_key, int owner);

// Every owner's mean frame (all-gathered, means[j] from rank j) -> the round's aggregate: the
// assembled mean, the members every owner accepted, and the rest with the first owner's reason.
// An error only when no member was accepted by any owner.
Result<Aggregate> GatherMeans(const std::vector<std::vector<std::uint8_t>>& means,
                              std::uint64_t round, const std::vector<std::uint64_t>& members,
                              Codec codec, std::size_t count, std::span<const std::uint8_t> key);

}  // namespace headroom::diloco
