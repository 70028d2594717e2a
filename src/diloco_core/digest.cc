#include "diloco_core/digest.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <bit>
#include <stdexcept>

namespace headroom::diloco {

Digest Sha256(std::span<const std::uint8_t> bytes) {
  Digest d{};
  SHA256(bytes.data(), bytes.size(), d.data());
  return d;
}

Digest Sha256Floats(std::span<const float> values) {
  static_assert(std::endian::native == std::endian::little, "hashes assume little-endian floats");
  return Sha256({reinterpret_cast<const std::uint8_t*>(values.data()), values.size_bytes()});
}

Digest HmacSha256(std::span<const std::uint8_t> key, std::span<const std::uint8_t> bytes) {
  Digest d{};
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), bytes.data(), bytes.size(),
           d.data(), &len) == nullptr ||
      len != d.size()) {
    throw std::runtime_error("HMAC-SHA256 failed");
  }
  return d;
}

bool DigestEqual(const Digest& a, const Digest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string Hex(const Digest& d) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (auto b : d) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

}  // namespace headroom::diloco
