// libFuzzer: a round's frames as they come off the network (docs/DILOCO.md, "Integrity" and
// "Aggregation"). The input is cut into up to 4 frames; each is tried as it is and, so that the
// fuzzer gets past the MAC, also re-sealed under the run's key (the decoder, the screen, a
// chunk's owner and the assembly of the owners' means then see its bytes). Nothing may crash,
// hang or read out of bounds; an accepted round's mean is finite and of the model's size.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "diloco_core/compress.h"
#include "diloco_core/contribution.h"
#include "diloco_core/scatter.h"

using namespace headroom::diloco;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const Codec codec = (data[0] & 1) ? Codec::kInt8 : Codec::kNone;
  const std::size_t count = 1 + data[1] % 64;
  data += 2;
  size -= 2;
  const std::vector<std::uint8_t> key = {'k', 'e', 'y'};
  const std::size_t frames_n = 1 + (size % 4);
  const std::size_t part = size / frames_n;
  std::vector<std::vector<std::uint8_t>> raw, sealed, chunks, means;
  std::vector<std::uint64_t> members;
  for (std::size_t i = 0; i < frames_n; ++i) {
    std::vector<std::uint8_t> bytes(data + i * part, data + (i + 1) * part);
    raw.push_back(bytes);
    sealed.push_back(SealFrame({static_cast<std::uint32_t>(i), 3, 100 + i}, codec, bytes, key));
    chunks.push_back(SealFrame({static_cast<std::uint32_t>(i), 3, 100 + i, 0}, codec, bytes, key));
    means.push_back(SealFrame(
        {static_cast<std::uint32_t>(i), 3, 100 + i, static_cast<std::uint16_t>(kMeanPart | i)},
        codec, bytes, key));
    members.push_back(100 + i);
  }
  for (const auto* frames : {&raw, &sealed}) {
    auto agg = AggregateRound(*frames, 3, members, codec, count, key, {});
    if (agg.ok()) {
      if (agg->mean.size() != count) std::abort();
      for (float x : agg->mean) {
        if (!std::isfinite(x)) std::abort();
      }
    }
  }
  for (const auto* frames : {&raw, &means}) {
    auto agg = GatherMeans(*frames, 3, members, codec, count, key);
    if (agg.ok()) {
      if (agg->mean.size() != count) std::abort();
      for (float x : agg->mean) {
        if (!std::isfinite(x)) std::abort();
      }
    }
  }
  for (const auto* frames : {&raw, &chunks}) {
    const auto mean = ReduceChunk(*frames, 3, members, codec, count, key, key, 0);
    if (mean.size() != MeanFrameBytes(codec, count, static_cast<int>(members.size()))) std::abort();
  }
  std::vector<float> out;
  (void)Decode(codec, {data, size}, count, out);
  return 0;
}
