#pragma once
// SHA-256 and HMAC-SHA256 (OpenSSL's libcrypto); digest.cc is the one file that calls it.
#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace headroom::diloco {

using Digest = std::array<std::uint8_t, 32>;

Digest Sha256(std::span<const std::uint8_t> bytes);
// The model's hash: SHA-256 of its parameters' float32 bits, little-endian, in order.
Digest Sha256Floats(std::span<const float> values);
Digest HmacSha256(std::span<const std::uint8_t> key, std::span<const std::uint8_t> bytes);
// Constant-time comparison (CRYPTO_memcmp).
bool DigestEqual(const Digest& a, const Digest& b);

std::string Hex(const Digest& d);

}  // namespace headroom::diloco
