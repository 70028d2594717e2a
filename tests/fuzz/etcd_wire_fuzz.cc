// Fuzzes etcd's wire format as the client reads it (etcd/etcd_wire.h): any bytes as an answer
// (a range's key-values, a transaction's responses, an error), as endpoints, as base64. Whatever
// comes, reading ends in a value or one error, never a crash; what decodes from base64 encodes
// back to the canonical form; an endpoint list parsed is one URL per item.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "etcd/etcd_wire.h"

using headroom::etcd::AnswerReader;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_discarded()) {
    AnswerReader r("fuzz");
    const int64_t revision = r.Revision(j);
    const auto kvs = r.Kvs(j);
    for (const nlohmann::json& op : r.Array(j, "responses")) {
      const nlohmann::json& range = r.Object(op, "response_range", false);
      (void)r.Kvs(range);
      (void)r.Int(r.Object(op, "response_put", false), "revision");
    }
    (void)r.Bool(j, "succeeded");
    if (r.ok()) {
      if (revision <= 0) std::abort();  // a good answer has a revision
      for (const auto& kv : kvs) {
        if (kv.key.empty()) std::abort();  // a key-value without a key is refused
      }
    } else if (r.error().message().empty()) {
      std::abort();
    }
    if (const auto e = headroom::etcd::ErrorOf(j); e && e->message.empty()) std::abort();
  }
  (void)headroom::etcd::HttpStatusError(500, text);
  if (const auto decoded = headroom::etcd::Base64Decode(text)) {
    const std::string again = headroom::etcd::Base64Encode(*decoded);
    if (headroom::etcd::Base64Decode(again) != decoded) std::abort();
  }
  if (const auto urls = headroom::etcd::ParseEndpoints(std::string(text)); urls.ok()) {
    for (const std::string& url : *urls) {
      if (!url.starts_with("http://") && !url.starts_with("https://")) std::abort();
    }
  }
  (void)headroom::coord::PrefixEnd(text);
  return 0;
}
