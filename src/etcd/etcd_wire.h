// etcd's JSON gateway, as bytes: how requests are written and answers read (the v3 API's
// grpc-gateway encoding: base64 bytes, 64-bit integers as strings, zero fields left out), and
// how its errors are sorted. Pure: no sockets, no clocks (etcd/etcd_store.cc is the transport).
// Fuzzed (tests/fuzz/etcd_wire_fuzz.cc).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/json_fields.h"
#include "coord/store.h"

namespace headroom::etcd {

// Base64 (RFC 4648, with padding): how the gateway carries bytes.
std::string Base64Encode(std::string_view in);
// Accepts padded and unpadded input; nullopt for anything else.
std::optional<std::string> Base64Decode(std::string_view in);

// {"key": .., "range_end": ..} for a key or a prefix; the empty prefix is every key.
nlohmann::json RangeJson(const std::string& key, bool prefix);
// A transaction's compare and operation, and the name of an operation's answer.
nlohmann::json CompareJson(const coord::Compare& c);
nlohmann::json OpJson(const coord::Op& op);
const char* ResponseName(coord::Op::Kind kind);
// Whether any operation writes.
bool Writes(const std::vector<coord::Op>& ops);

// "etcd://h:p,h2:p2", "etcds://...", "http(s)://h:p,...", "h:p": one URL per member; a Usage
// error naming what is wrong. Under etcd:// or etcds:// every member is host:port: a scheme of
// its own ("etcds://http://h:p") is refused, not taken over the list's.
Result<std::vector<std::string>> ParseEndpoints(const std::string& text);

// Reads the fields of one answer (common/json_fields.h). The first problem is kept and later
// reads return zero values, so a caller reads everything and checks ok() once. The gateway
// leaves out zero-valued fields: an absent (or null) number is 0, an absent string empty, an
// absent list empty.
class AnswerReader {
 public:
  explicit AnswerReader(std::string what) : what_(std::move(what)) {}

  bool ok() const { return fields_.ok(); }
  // Io: "WHAT: malformed answer: PROBLEM".
  Error error() const;
  void Fail(std::string problem);

  const nlohmann::json& Object(const nlohmann::json& j, const char* field, bool required);
  const nlohmann::json& Array(const nlohmann::json& j, const char* field);
  // A 64-bit integer: a JSON string (how the gateway sends them) or number.
  int64_t Int(const nlohmann::json& j, const char* field);
  std::string String(const nlohmann::json& j, const char* field);
  // Bytes, base64-encoded.
  std::string Bytes(const nlohmann::json& j, const char* field);
  bool Bool(const nlohmann::json& j, const char* field);
  coord::KeyValue Kv(const nlohmann::json& j);
  std::vector<coord::KeyValue> Kvs(const nlohmann::json& j);
  // header.revision, which every unary answer has (a store's revision is at least 1).
  int64_t Revision(const nlohmann::json& j);

 private:
  std::string what_;
  JsonFields fields_{"", JsonFields::Missing::kZero};
};

// How a request failed, for whether to try another member.
enum class Failure {
  kFinal,         // etcd refused it: say so
  kNotApplied,    // refused before it was proposed (no leader...): another member may take it
  kMaybeApplied,  // proposed and not confirmed (request timed out): it may have been applied
};

struct EtcdError {
  std::string message;
  Failure failure = Failure::kFinal;
  // What the callers see (common/error.h), from etcd's gRPC code: NOT_FOUND (5: a lease it
  // does not have), OUT_OF_RANGE (11: a revision compacted), UNAUTHENTICATED (16: a token it
  // does not know); anything else is an I/O failure.
  ErrorKind kind = ErrorKind::kIo;
};

// The message of an error answer: {"error": "..", "message": "..", "code": N} from unary calls,
// {"error": {"message": .., "grpc_code": ..}} from streams. nullopt when `j` is not one.
std::optional<EtcdError> ErrorOf(const nlohmann::json& j);
// The error of an answer other than 200 OK: etcd's, or the status and the start of the body.
EtcdError HttpStatusError(int status, std::string_view body);

}  // namespace headroom::etcd
