// Common random numbers: every random quantity of the twin is a pure function of a key --
// (seed, stream, i, j) -- rather than the next draw of one generator. Two runs on one seed that
// differ only in their controller therefore face the same world: the same completion lengths
// for the same (step's rollout, prompt, completion), the same telemetry noise for the same
// (tick, GPU), however many draws the other's actions consumed. A larger group size takes the
// same first completions of each prompt and more after them.
//
// The key is hashed with SplitMix64's finaliser (Steele, Lea and Flood 2014), applied once per
// key word; a uniform takes its top 52 bits, centred in (0, 1); a standard normal is Box-Muller
// on two uniforms of the key (the cosine branch, and the sine branch for a second). Pure, no state:
// thread-safe.
#pragma once

#include <cstdint>

namespace headroom::twin {

// The twin's streams (each its own keys; a new stream never moves the draws of another).
inline constexpr uint64_t kLengthStream = 0x6c656e6774687321ull;      // completion lengths
inline constexpr uint64_t kNoiseStream = 0x6e6f697365212121ull;       // AR(1) innovations
inline constexpr uint64_t kStartNoiseStream = 0x73746172746e6f69ull;  // stationary first noise
// (the slow-storage onset has its own stream in twin.cc, kStorageStream)

// SplitMix64's finaliser: a bijection of 64 bits that spreads every input bit over the output.
constexpr uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// 64 bits for a key: each word mixed into the hash of the words before it.
constexpr uint64_t KeyedBits(uint64_t seed, uint64_t stream, uint64_t i, uint64_t j) {
  return Mix64(Mix64(Mix64(Mix64(seed) ^ stream) ^ i) ^ j);
}

// In (0, 1), never 0 or 1: (top 52 bits + 1/2) / 2^52, exact in a double (with 53 bits the
// largest, 1 - 2^-54, would round to 1).
constexpr double UnitUniform(uint64_t bits) {
  return (static_cast<double>(bits >> 12) + 0.5) * 0x1p-52;
}

// Two independent standard normals for the key (Box-Muller: the cosine and the sine branch; the
// second uniform from the key's bits mixed once more).
struct NormalPair {
  double first;
  double second;
};
NormalPair KeyedNormalPair(uint64_t seed, uint64_t stream, uint64_t i, uint64_t j);

// One standard normal for the key: the pair's first.
inline double KeyedNormal(uint64_t seed, uint64_t stream, uint64_t i, uint64_t j) {
  return KeyedNormalPair(seed, stream, i, j).first;
}

}  // namespace headroom::twin
