#include "etcd/etcd_wire.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <limits>

namespace headroom::etcd {

using json = nlohmann::json;

namespace {

constexpr std::string_view kBase64Alphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

const char* TargetName(coord::Compare::Target t) {
  switch (t) {
    case coord::Compare::Target::kValue:
      return "VALUE";
    case coord::Compare::Target::kCreateRevision:
      return "CREATE";
    case coord::Compare::Target::kModRevision:
      return "MOD";
    case coord::Compare::Target::kVersion:
      return "VERSION";
    case coord::Compare::Target::kLease:
      return "LEASE";
  }
  return "MOD";
}

const char* TargetField(coord::Compare::Target t) {
  switch (t) {
    case coord::Compare::Target::kValue:
      return "value";
    case coord::Compare::Target::kCreateRevision:
      return "create_revision";
    case coord::Compare::Target::kModRevision:
      return "mod_revision";
    case coord::Compare::Target::kVersion:
      return "version";
    case coord::Compare::Target::kLease:
      return "lease";
  }
  return "mod_revision";
}

const char* ResultName(coord::Compare::Result r) {
  switch (r) {
    case coord::Compare::Result::kEqual:
      return "EQUAL";
    case coord::Compare::Result::kNotEqual:
      return "NOT_EQUAL";
    case coord::Compare::Result::kLess:
      return "LESS";
    case coord::Compare::Result::kGreater:
      return "GREATER";
  }
  return "EQUAL";
}

}  // namespace

std::string Base64Encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    const uint32_t v = uint32_t{static_cast<uint8_t>(in[i])} << 16 |
                       uint32_t{static_cast<uint8_t>(in[i + 1])} << 8 |
                       uint32_t{static_cast<uint8_t>(in[i + 2])};
    out += kBase64Alphabet[v >> 18 & 63];
    out += kBase64Alphabet[v >> 12 & 63];
    out += kBase64Alphabet[v >> 6 & 63];
    out += kBase64Alphabet[v & 63];
  }
  const size_t rest = in.size() - i;
  if (rest > 0) {
    uint32_t v = uint32_t{static_cast<uint8_t>(in[i])} << 16;
    if (rest == 2) v |= uint32_t{static_cast<uint8_t>(in[i + 1])} << 8;
    out += kBase64Alphabet[v >> 18 & 63];
    out += kBase64Alphabet[v >> 12 & 63];
    out += rest == 2 ? kBase64Alphabet[v >> 6 & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> Base64Decode(std::string_view in) {
  static const std::array<int8_t, 256> kValue = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    for (size_t i = 0; i < kBase64Alphabet.size(); ++i) {
      t[static_cast<uint8_t>(kBase64Alphabet[i])] = static_cast<int8_t>(i);
    }
    return t;
  }();
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  if (in.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(in.size() * 3 / 4);
  uint32_t bits = 0;
  int n_bits = 0;
  for (const char c : in) {
    const int8_t v = kValue[static_cast<uint8_t>(c)];
    if (v < 0) return std::nullopt;
    bits = (bits << 6 | static_cast<uint32_t>(v)) & 0xffffff;
    n_bits += 6;
    if (n_bits >= 8) {
      n_bits -= 8;
      out += static_cast<char>(static_cast<uint8_t>(bits >> n_bits & 0xff));
    }
  }
  return out;
}

json RangeJson(const std::string& key, bool prefix) {
  json j = json::object();
  if (prefix && key.empty()) {
    j["key"] = Base64Encode(std::string_view("\0", 1));
    j["range_end"] = Base64Encode(std::string_view("\0", 1));
  } else {
    j["key"] = Base64Encode(key);
    if (prefix) j["range_end"] = Base64Encode(coord::PrefixEnd(key));
  }
  return j;
}

json CompareJson(const coord::Compare& c) {
  json j = json::object();
  j["key"] = Base64Encode(c.key);
  j["target"] = TargetName(c.target);
  j["result"] = ResultName(c.result);
  // Sent even when zero: "create_revision == 0" is the create-if-absent test.
  j[TargetField(c.target)] =
      c.target == coord::Compare::Target::kValue ? Base64Encode(c.value) : std::to_string(c.number);
  return j;
}

json OpJson(const coord::Op& op) {
  json j = json::object();
  switch (op.kind) {
    case coord::Op::Kind::kPut: {
      json put = json::object();
      put["key"] = Base64Encode(op.key);
      put["value"] = Base64Encode(op.value);
      if (op.lease != 0) put["lease"] = std::to_string(op.lease);
      j["request_put"] = std::move(put);
      break;
    }
    case coord::Op::Kind::kDelete:
      j["request_delete_range"] = RangeJson(op.key, op.prefix);
      break;
    case coord::Op::Kind::kGet:
      j["request_range"] = RangeJson(op.key, op.prefix);
      break;
  }
  return j;
}

const char* ResponseName(coord::Op::Kind kind) {
  switch (kind) {
    case coord::Op::Kind::kPut:
      return "response_put";
    case coord::Op::Kind::kDelete:
      return "response_delete_range";
    case coord::Op::Kind::kGet:
      return "response_range";
  }
  return "response_range";
}

bool Writes(const std::vector<coord::Op>& ops) {
  return std::any_of(ops.begin(), ops.end(),
                     [](const coord::Op& op) { return op.kind != coord::Op::Kind::kGet; });
}

Result<std::vector<std::string>> ParseEndpoints(const std::string& text) {
  std::string_view rest = text;
  constexpr std::string_view kEtcdScheme = "etcd://";
  constexpr std::string_view kEtcdsScheme = "etcds://";
  // etcd:// and etcds:// name the scheme once, for the whole list.
  std::string scheme = "http";
  std::string_view list_scheme;  // "etcd://" or "etcds://" when the list starts with one
  if (rest.substr(0, kEtcdScheme.size()) == kEtcdScheme) {
    rest.remove_prefix(kEtcdScheme.size());
    list_scheme = kEtcdScheme;
  } else if (rest.substr(0, kEtcdsScheme.size()) == kEtcdsScheme) {
    rest.remove_prefix(kEtcdsScheme.size());
    list_scheme = kEtcdsScheme;
    scheme = "https";
  }
  std::vector<std::string> urls;
  std::string first_scheme;
  while (true) {
    const size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '/')) item.remove_suffix(1);
    std::string item_scheme = scheme;
    // Under etcd:// or etcds:// a scheme of its own would override the list's
    // ("etcds://http://h:p" was plain HTTP).
    if (!list_scheme.empty() && item.find("://") != std::string_view::npos) {
      return Error::Usage(fmt::format(
          "etcd endpoint '{}' in '{}': {} names the scheme of the whole list; give host:port "
          "after it (or http(s)://host:port without it)",
          item, text, list_scheme));
    }
    if (item.substr(0, 7) == "http://") {
      item.remove_prefix(7);
      item_scheme = "http";
    } else if (item.substr(0, 8) == "https://") {
      item.remove_prefix(8);
      item_scheme = "https";
    }
    if (first_scheme.empty()) first_scheme = item_scheme;
    if (item_scheme != first_scheme) {
      return Error::Usage(fmt::format(
          "etcd endpoints '{}': mix http:// and https://; expected one scheme for all", text));
    }
    const size_t colon = item.rfind(':');
    if (item.find("://") != std::string_view::npos) {
      return Error::Usage(fmt::format(
          "etcd endpoint '{}': expected http:// or https:// (etcd:// or etcds://)", item));
    }
    int port = 0;
    const std::string_view port_text =
        colon == std::string_view::npos ? std::string_view() : item.substr(colon + 1);
    const auto [end, ec] =
        std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (colon == 0 || colon == std::string_view::npos || ec != std::errc() ||
        end != port_text.data() + port_text.size() || port <= 0 || port > 65535) {
      return Error::Usage(fmt::format(
          "etcd endpoint '{}' in '{}': expected host:port or http(s)://host:port", item, text));
    }
    // The host: a name or an IPv4 address ([A-Za-z0-9.-_]), or an IPv6 one in brackets.
    const std::string_view host = item.substr(0, colon);
    const bool bracketed = host.size() > 2 && host.front() == '[' && host.back() == ']';
    const std::string_view host_chars = bracketed ? host.substr(1, host.size() - 2) : host;
    const bool host_ok = std::all_of(host_chars.begin(), host_chars.end(), [&](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ||
             (bracketed ? c == ':' : c == '_');
    });
    if (!host_ok) {
      return Error::Usage(fmt::format(
          "etcd endpoint '{}' in '{}': host '{}': expected a host name or an IP address", item,
          text, host));
    }
    urls.push_back(fmt::format("{}://{}", item_scheme, item));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return urls;
}

Error AnswerReader::error() const {
  return Error::Io(fmt::format("{}: malformed answer: {}", what_, fields_.problem()));
}

void AnswerReader::Fail(std::string problem) { fields_.Fail("", problem); }

const json& AnswerReader::Object(const json& j, const char* field, bool required) {
  JsonObject at(fields_, j);
  const JsonObject child = at.Object(field);  // an empty object when absent or not one
  if (required && ok() && !at.Has(field)) fields_.Fail(field, "missing");
  return child.value();
}

const json& AnswerReader::Array(const json& j, const char* field) {
  return JsonObject(fields_, j).Array(field);
}

int64_t AnswerReader::Int(const json& j, const char* field) {
  JsonObject at(fields_, j);
  const json* v = at.Member(field);
  if (v == nullptr || !v->is_string()) return at.Int64(field);
  const std::string& s = v->get_ref<const std::string&>();
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec == std::errc() && end == s.data() + s.size() && !s.empty()) return n;
  fields_.Fail(field, "expected a 64-bit integer");
  return 0;
}

std::string AnswerReader::String(const json& j, const char* field) {
  return JsonObject(fields_, j).String(field);
}

std::string AnswerReader::Bytes(const json& j, const char* field) {
  std::optional<std::string> bytes = Base64Decode(String(j, field));
  if (!bytes) {
    fields_.Fail(field, "expected base64");
    return {};
  }
  return std::move(*bytes);
}

bool AnswerReader::Bool(const json& j, const char* field) {
  return JsonObject(fields_, j).Bool(field);
}

coord::KeyValue AnswerReader::Kv(const json& j) {
  coord::KeyValue kv;
  if (!j.is_object()) {
    Fail("a key-value is not an object");
    return kv;
  }
  kv.key = Bytes(j, "key");
  if (kv.key.empty()) Fail("a key-value without a key");
  kv.value = Bytes(j, "value");
  kv.create_revision = Int(j, "create_revision");
  kv.mod_revision = Int(j, "mod_revision");
  kv.version = Int(j, "version");
  kv.lease = Int(j, "lease");
  return kv;
}

std::vector<coord::KeyValue> AnswerReader::Kvs(const json& j) {
  std::vector<coord::KeyValue> kvs;
  for (const json& e : Array(j, "kvs")) kvs.push_back(Kv(e));
  return kvs;
}

int64_t AnswerReader::Revision(const json& j) {
  const int64_t revision = Int(Object(j, "header", true), "revision");
  if (revision <= 0 && ok()) Fail("no header.revision");
  return revision;
}

std::optional<EtcdError> ErrorOf(const json& j) {
  if (!j.is_object()) return std::nullopt;
  std::string message;
  int64_t code = -1;
  const auto error = j.find("error");
  if (error == j.end()) return std::nullopt;
  if (error->is_object()) {
    const auto m = error->find("message");
    if (m != error->end() && m->is_string()) message = m->get<std::string>();
    const auto c = error->find("grpc_code");
    if (c != error->end() && c->is_number_integer()) code = c->get<int64_t>();
  } else {
    const auto m = j.find("message");
    if (m != j.end() && m->is_string()) message = m->get<std::string>();
    if (message.empty() && error->is_string()) message = error->get<std::string>();
    const auto c = j.find("code");
    if (c != j.end() && c->is_number_integer()) code = c->get<int64_t>();
  }
  if (message.empty()) message = "an error without a message";
  EtcdError e{code >= 0 ? fmt::format("{} (code {})", message, code) : message, Failure::kFinal};
  if (code == 5) e.kind = ErrorKind::kNotFound;
  if (code == 11) e.kind = ErrorKind::kConflict;
  if (code == 16) e.kind = ErrorKind::kUnauthenticated;
  const auto has = [&](std::string_view s) { return message.find(s) != std::string::npos; };
  // etcd's rpctypes: these are returned before the request is proposed to raft...
  if (has("no leader") || has("proposal dropped") || has("leader changed") ||
      has("too many requests")) {
    e.failure = Failure::kNotApplied;
  }
  // ...and these after: "request timed out[, possibly due to ...]", "server stopped".
  if (has("timed out") || has("server stopped")) e.failure = Failure::kMaybeApplied;
  return e;
}

EtcdError HttpStatusError(int status, std::string_view body) {
  if (std::optional<EtcdError> e = ErrorOf(json::parse(body, nullptr, false))) return *e;
  constexpr size_t kShownBytes = 200;
  std::string shown(body.substr(0, kShownBytes));
  std::replace(shown.begin(), shown.end(), '\n', ' ');
  return EtcdError{fmt::format("HTTP {}: {}", status, shown), Failure::kFinal};
}

}  // namespace headroom::etcd
