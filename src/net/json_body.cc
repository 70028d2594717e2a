#include "net/json_body.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace headroom::net {
namespace {

using json = nlohmann::json;

// Follows the parse: which key's value is open (for an error inside it), and the keys of each
// open object, to find one given twice.
class BodyScan final : public nlohmann::json_sax<json> {
 public:
  std::optional<std::string> field() const {
    return in_value_ ? std::optional(key_) : std::nullopt;
  }
  const std::optional<std::string>& twice() const { return twice_; }

  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override {
    Value();
    keys_.emplace_back();
    return true;
  }
  bool key(string_t& k) override {
    key_ = k;
    in_value_ = true;
    if (!keys_.empty() && !keys_.back().insert(k).second) {
      twice_ = k;
      return false;  // stop here: the first duplicate is the one to name
    }
    return true;
  }
  bool end_object() override {
    if (!keys_.empty()) keys_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  bool Value() {
    in_value_ = false;
    return true;
  }
  std::string key_;
  bool in_value_ = false;
  std::vector<std::set<std::string>> keys_;
  std::optional<std::string> twice_;
};

}  // namespace

size_t FirstInvalidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80;
    unsigned char hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

Status CheckJsonBody(std::string_view body) {
  if (const size_t nul = body.find('\0'); nul != std::string_view::npos) {
    return Error::Input(fmt::format("body: a NUL byte at byte {}", nul));
  }
  if (const size_t bad = FirstInvalidUtf8(body); bad != std::string_view::npos) {
    BodyScan scan;
    const std::string_view head = body.substr(0, bad + 1);
    json::sax_parse(head.begin(), head.end(), &scan);
    if (const auto field = scan.field()) {
      return Error::Input(
          fmt::format("field '{}': invalid UTF-8 at byte {}", field->substr(0, 64), bad));
    }
    return Error::Input(fmt::format("body: invalid UTF-8 at byte {}", bad));
  }
  BodyScan scan;
  json::sax_parse(body.begin(), body.end(), &scan);
  if (scan.twice()) {
    return Error::Input(fmt::format("field '{}': given twice", scan.twice()->substr(0, 64)));
  }
  return OkStatus();
}

}  // namespace headroom::net
