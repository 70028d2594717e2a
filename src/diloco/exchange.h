#pragma once
// One attempt at a round's exchange on its group's communicator: my pseudo-gradient sealed,
// the collectives, and the round's aggregate (docs/DILOCO.md, "Aggregation"). trimmed-mean:
// one frame each, all-gathered, screened and trimmed (contribution.h); mean: the chunks
// all-to-all, each owner's mean all-gathered (scatter.h).
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "diloco_comm/communicator.h"
#include "diloco_core/compress.h"
#include "diloco_core/contribution.h"
#include "diloco_core/scatter.h"

namespace headroom::diloco {

struct ExchangeSpec {
  std::uint64_t round = 0;             // what the frames carry as their round
  std::vector<std::uint64_t> members;  // the group's member ids, in rank order
  int rank = 0;                        // mine
  Codec codec = Codec::kInt8;
  Aggregation aggregate = Aggregation::kTrimmedMean;
  ScreenOptions screen;                   // trimmed-mean's
  std::span<const std::uint8_t> key;      // what I sign with (the run's key)
  std::span<const std::uint8_t> run_key;  // what I check others with
};

// The aggregate; std::nullopt when a collective failed (`why` says how: attempt again without
// whoever is gone); an error when the contributions gave no aggregate. `error` is my error
// feedback, updated by my encoding.
Result<std::optional<Aggregate>> Exchange(Communicator& comm, const ExchangeSpec& spec,
                                          std::span<const float> delta, std::vector<float>& error,
                                          std::string* why);

}  // namespace headroom::diloco
