#include "diloco_core/compress.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace headroom::diloco {
namespace {

void PutU32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

std::uint32_t GetU32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}

void PutF32(std::uint8_t* p, float v) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, 4);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(bits >> (8 * i));
}

float GetF32(const std::uint8_t* p) {
  const std::uint32_t bits = GetU32(p);
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

std::size_t Blocks(std::size_t count, std::uint32_t block) { return (count + block - 1) / block; }

}  // namespace

Result<Codec> ParseCodec(const std::string& name) {
  if (name == "none") return Codec::kNone;
  if (name == "int8") return Codec::kInt8;
  return Error::Usage("--compress: '" + name + "' is not a codec (int8, none)");
}

const char* CodecName(Codec codec) { return codec == Codec::kInt8 ? "int8" : "none"; }

std::size_t EncodedBytes(Codec codec, std::size_t count, std::uint32_t block) {
  if (codec == Codec::kNone) return 8 + 4 * count;
  return 8 + 4 * Blocks(count, block) + count;
}

std::vector<std::uint8_t> Encode(Codec codec, std::span<const float> values,
                                 std::vector<float>& error, std::uint32_t block) {
  const std::size_t n = values.size();
  std::vector<std::uint8_t> out;
  out.reserve(EncodedBytes(codec, n, block));
  PutU32(out, static_cast<std::uint32_t>(n));
  if (codec == Codec::kNone) {
    PutU32(out, 0);
    out.resize(8 + 4 * n);
    for (std::size_t i = 0; i < n; ++i) PutF32(out.data() + 8 + 4 * i, values[i]);
    error.assign(n, 0.0f);
    return out;
  }
  if (error.size() != n) error.assign(n, 0.0f);
  PutU32(out, block);
  const std::size_t blocks = Blocks(n, block);
  out.resize(8 + 4 * blocks + n);
  std::uint8_t* scales = out.data() + 8;
  std::uint8_t* q = scales + 4 * blocks;
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t lo = b * block;
    const std::size_t hi = std::min(n, lo + block);
    float max_abs = 0.0f;
    bool finite = true;
    for (std::size_t i = lo; i < hi; ++i) {
      const float v = values[i] + error[i];
      finite = finite && std::isfinite(v);
      max_abs = std::max(max_abs, std::fabs(v));
    }
    // A block with a NaN or an infinity says so (its scale is NaN): a diverged worker's values
    // are never laundered into finite levels.
    const float scale = finite ? max_abs / 127.0f : std::numeric_limits<float>::quiet_NaN();
    PutF32(scales + 4 * b, scale);
    for (std::size_t i = lo; i < hi; ++i) {
      const float v = values[i] + error[i];
      long level = 0;
      if (finite && scale > 0.0f) level = std::clamp(std::lround(v / scale), -127L, 127L);
      q[i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(level));
      error[i] = finite ? v - static_cast<float>(level) * scale : 0.0f;
    }
  }
  return out;
}

Status Decode(Codec codec, std::span<const std::uint8_t> bytes, std::size_t expected_count,
              std::vector<float>& out) {
  if (bytes.size() < 8) return Error::Input("contribution: shorter than its header");
  const std::size_t n = GetU32(bytes.data());
  const std::uint32_t block = GetU32(bytes.data() + 4);
  if (n != expected_count) {
    return Error::Input("contribution: " + std::to_string(n) + " values, expected " +
                        std::to_string(expected_count));
  }
  if (codec == Codec::kInt8 && block == 0) return Error::Input("contribution: block 0");
  if (codec == Codec::kNone && block != 0) return Error::Input("contribution: not float32");
  if (bytes.size() != EncodedBytes(codec, n, block)) {
    return Error::Input("contribution: " + std::to_string(bytes.size()) + " bytes, expected " +
                        std::to_string(EncodedBytes(codec, n, block)));
  }
  out.resize(n);
  if (codec == Codec::kNone) {
    for (std::size_t i = 0; i < n; ++i) out[i] = GetF32(bytes.data() + 8 + 4 * i);
    return OkStatus();
  }
  const std::size_t blocks = Blocks(n, block);
  const std::uint8_t* scales = bytes.data() + 8;
  const std::uint8_t* q = scales + 4 * blocks;
  for (std::size_t b = 0; b < blocks; ++b) {
    const float scale = GetF32(scales + 4 * b);
    if (!std::isfinite(scale)) {
      return Error::Input("non-finite: block " + std::to_string(b) + " carries a NaN or infinity");
    }
    if (scale < 0.0f) {
      return Error::Input("contribution: block " + std::to_string(b) + " has a negative scale");
    }
    const std::size_t lo = b * block;
    const std::size_t hi = std::min(n, lo + block);
    for (std::size_t i = lo; i < hi; ++i) {
      out[i] = static_cast<float>(static_cast<std::int8_t>(q[i])) * scale;
    }
  }
  return OkStatus();
}

}  // namespace headroom::diloco
