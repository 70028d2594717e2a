#pragma once
// One worker's pseudo-gradient for one outer round, as it goes on the wire, and what every
// member does with the round's contributions before the outer step (docs/DILOCO.md,
// "Integrity"): authenticate, decode, screen, aggregate. Pure: the same frames give the same
// bits on every member (contributions are taken in rank order, sums in double, in order).
//
// Frame: "HRDC" | u8 version (1) | u8 codec | u16 part | u32 rank | u64 round | u64 member |
// payload (compress.h) | HMAC-SHA256(key, everything before it). Every frame of a round has the
// same length, so the round's frames travel in one all-gather. `part` is 0 for a whole
// pseudo-gradient; the reduce-scatter (scatter.h) numbers its chunks and their means with it.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "diloco_core/compress.h"

namespace headroom::diloco {

inline constexpr std::size_t kFrameHeaderBytes = 28;
inline constexpr std::size_t kFrameMacBytes = 32;

struct FrameId {
  std::uint32_t rank = 0;    // the sender's rank in the round's group
  std::uint64_t round = 0;   // the outer round
  std::uint64_t member = 0;  // the sender's member id (its etcd lease)
  std::uint16_t part = 0;    // which part of the round's exchange (0: the whole)
};

std::size_t FrameBytes(Codec codec, std::size_t count, std::uint32_t block = kDefaultBlock);

std::vector<std::uint8_t> SealFrame(const FrameId& id, Codec codec,
                                    std::span<const std::uint8_t> payload,
                                    std::span<const std::uint8_t> key);

// The payload of a frame that carries `expected` in its header and authenticates under `key`;
// an input error saying what is wrong otherwise ("bad HMAC", "round 7, expected 8", ...).
Result<std::span<const std::uint8_t>> OpenFrame(std::span<const std::uint8_t> frame,
                                                const FrameId& expected, Codec codec,
                                                std::span<const std::uint8_t> key);

// The screen (thresholds in docs/DILOCO.md): with at least `min_for_screen` authenticated,
// finite contributions, one whose L2 norm is more than norm_factor times the median norm, or
// less than the median over norm_factor, is rejected ("norm"); then one whose cosine with the
// coordinate-wise median of the rest is below min_cosine ("direction").
struct ScreenOptions {
  double norm_factor = 3.0;
  double min_cosine = 0.0;
  int min_for_screen = 3;
  bool trimmed_mean = true;  // with >= 3 accepted: drop each coordinate's lowest and highest
};

struct Rejection {
  std::uint32_t rank = 0;
  std::string reason;  // "hmac", "malformed", "non-finite", "norm", "direction"
  std::string detail;  // one line
};

struct Aggregate {
  std::vector<float> mean;              // the pseudo-gradient the outer step takes
  std::vector<std::uint32_t> accepted;  // ranks, ascending
  std::vector<Rejection> rejected;      // in rank order
};

// frames[i] is rank i's frame; `round` and `members[i]` what the header must carry.
Result<Aggregate> AggregateRound(const std::vector<std::vector<std::uint8_t>>& frames,
                                 std::uint64_t round, const std::vector<std::uint64_t>& members,
                                 Codec codec, std::size_t count, std::span<const std::uint8_t> key,
                                 const ScreenOptions& options);

}  // namespace headroom::diloco
