// Strict query strings: every parameter known, given once, with a value; numbers in plain
// decimal only. A lax parser reads "after=1e3" as 1 and "timeout_s=0x10" as 16; these say 400.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace headroom::net {

// A query's parameters, as sent (no percent-decoding: no parameter here needs it).
struct Query {
  std::vector<std::pair<std::string_view, std::string_view>> items;
  std::optional<std::string_view> Get(std::string_view key) const;
};

// "a=1&b=2" -> items (views into `text`); an input error naming the parameter on an unknown,
// repeated or valueless one. An empty text is no parameter.
Result<Query> ParseQuery(std::string_view text, std::initializer_list<std::string_view> known);

// A decimal integer (digits only, no sign, fits in 64 bits), and a plain decimal number
// (optional sign, digits, optional fraction and exponent; no hex, NaN or infinity).
std::optional<uint64_t> ParseQueryUint(std::string_view text);
std::optional<double> ParseQueryReal(std::string_view text);

// The query of a history route (`?after=T`, the only parameter): T, or `none` without it; an
// input error naming the parameter, with `what_t_is` ("agent time in seconds"), otherwise.
Result<double> ParseAfterQuery(std::string_view text, double none, std::string_view what_t_is);

}  // namespace headroom::net
