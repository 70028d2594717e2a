#include "twin/keyed_random.h"

#include <cmath>
#include <numbers>

namespace headroom::twin {

NormalPair KeyedNormalPair(uint64_t seed, uint64_t stream, uint64_t i, uint64_t j) {
  const uint64_t bits = KeyedBits(seed, stream, i, j);
  const double r = std::sqrt(-2.0 * std::log(UnitUniform(bits)));
  const double angle = 2.0 * std::numbers::pi * UnitUniform(Mix64(bits));
  return {r * std::cos(angle), r * std::sin(angle)};
}

}  // namespace headroom::twin
