#include "net/query.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace headroom::net {

std::optional<std::string_view> Query::Get(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return v;
  }
  return std::nullopt;
}

Result<Query> ParseQuery(std::string_view text, std::initializer_list<std::string_view> known) {
  Query q;
  if (text.empty()) return q;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t amp = std::min(text.find('&', start), text.size());
    const std::string_view item = text.substr(start, amp - start);
    const size_t eq = item.find('=');
    const std::string_view key = item.substr(0, eq);
    const bool is_known = std::find(known.begin(), known.end(), key) != known.end();
    if (!is_known) {
      return Error::Input(fmt::format("query: unknown parameter '{}'",
                                      key.substr(0, std::min<size_t>(key.size(), 64))));
    }
    if (eq == std::string_view::npos) {
      return Error::Input(fmt::format("query: parameter '{}' has no value", key));
    }
    if (q.Get(key)) return Error::Input(fmt::format("query: parameter '{}' repeated", key));
    q.items.emplace_back(key, item.substr(eq + 1));
    start = amp + 1;
  }
  return q;
}

std::optional<uint64_t> ParseQueryUint(std::string_view text) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return v;
}

std::optional<double> ParseQueryReal(std::string_view text) {
  // [+-]digits[.digits][(e|E)[+-]digits], or [+-].digits...: what from_chars's general format
  // takes, minus its NaN, infinity and hex spellings.
  size_t i = 0;
  const size_t n = text.size();
  if (n == 0 || n > 64) return std::nullopt;
  if (text[i] == '+' || text[i] == '-') ++i;
  size_t digits = 0;
  while (i < n && text[i] >= '0' && text[i] <= '9') ++i, ++digits;
  if (i < n && text[i] == '.') {
    ++i;
    while (i < n && text[i] >= '0' && text[i] <= '9') ++i, ++digits;
  }
  if (digits == 0) return std::nullopt;
  if (i < n && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < n && (text[i] == '+' || text[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < n && text[i] >= '0' && text[i] <= '9') ++i, ++exp_digits;
    if (exp_digits == 0) return std::nullopt;
  }
  if (i != n) return std::nullopt;
  const std::string_view number = text[0] == '+' ? text.substr(1) : text;
  double v = 0.0;
  const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
  if (ec != std::errc() || ptr != number.data() + number.size() || !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

Result<double> ParseAfterQuery(std::string_view text, double none, std::string_view what_t_is) {
  auto q = ParseQuery(text, {"after"});
  if (!q) return std::move(q).error();
  const auto after = q->Get("after");
  if (!after) return none;
  const auto t = ParseQueryReal(*after);
  if (!t) return Error::Input(fmt::format("after: expected {}", what_t_is));
  return *t;
}

}  // namespace headroom::net
