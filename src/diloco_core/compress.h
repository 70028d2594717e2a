#pragma once
// Pseudo-gradients on the wire (docs/DILOCO.md, "Compression"). int8: each block of `block`
// values is sent as one float scale (the block's largest magnitude / 127) and one signed byte
// per value (round to nearest, ties away from zero); what rounding leaves out is kept in the
// sender's error-feedback buffer and added to the next round's values, so nothing is lost for
// good. A block holding a NaN or an infinity is sent with a NaN scale, and decoding it fails
// ("non-finite"): a diverged worker is seen, never rounded into finite levels. none: the values
// as little-endian float32.
//
// Encoded layout (both codecs): u32 count, u32 block (0 for none), then for int8 the
// ceil(count / block) float32 scales followed by count int8 values; for none, count float32.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"

namespace headroom::diloco {

enum class Codec { kNone, kInt8 };

Result<Codec> ParseCodec(const std::string& name);  // "none", "int8"
const char* CodecName(Codec codec);

inline constexpr std::uint32_t kDefaultBlock = 256;

// Bytes of an encoding of `count` values.
std::size_t EncodedBytes(Codec codec, std::size_t count, std::uint32_t block = kDefaultBlock);

// values + error -> bytes; error <- (values + error) - decode(bytes). `error` is resized (zeros)
// when it does not have values' size. For kNone the error stays zero.
std::vector<std::uint8_t> Encode(Codec codec, std::span<const float> values,
                                 std::vector<float>& error, std::uint32_t block = kDefaultBlock);

// bytes -> values; an input error when the bytes are not an encoding of `expected_count` values
// (wrong length, count or block) or a scale is not finite.
Status Decode(Codec codec, std::span<const std::uint8_t> bytes, std::size_t expected_count,
              std::vector<float>& out);

}  // namespace headroom::diloco
