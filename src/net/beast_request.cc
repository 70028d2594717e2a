#include "net/beast_request.h"

#include <algorithm>
#include <iterator>

namespace headroom::net {

namespace {

namespace http = boost::beast::http;

std::optional<std::string_view> Header(const BeastRequest& req, http::field field) {
  const auto it = req.find(field);
  if (it == req.end()) return std::nullopt;
  return std::string_view(it->value().data(), it->value().size());
}

bool HasControlByte(boost::beast::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && u != '\t') || u == 0x7f;
  });
}

}  // namespace

Request ToRequest(const BeastRequest& req) {
  Request r;
  r.method = std::string_view(req.method_string().data(), req.method_string().size());
  r.target = std::string_view(req.target().data(), req.target().size());
  r.host = Header(req, http::field::host);
  r.authorization = Header(req, http::field::authorization);
  r.content_type = Header(req, http::field::content_type);
  r.body = req.body();
  return r;
}

std::optional<std::string> FramingError(const BeastRequest& req) {
  for (const auto& f : req) {
    if (HasControlByte(f.name_string()) || HasControlByte(f.value())) {
      return "a control byte in a header field";
    }
  }
  if (req.count(http::field::host) > 1) return "Host: repeated";
  const size_t lengths = req.count(http::field::content_length);
  if (lengths > 1) return "Content-Length: repeated";
  if (lengths == 1) {
    const auto v = *Header(req, http::field::content_length);
    if (v.empty() ||
        !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return "Content-Length: expected decimal digits";
    }
  }
  const size_t encodings = req.count(http::field::transfer_encoding);
  if (encodings > 0) {
    if (lengths > 0) return "Transfer-Encoding with Content-Length";
    if (encodings > 1) return "Transfer-Encoding: repeated";
    const http::token_list codings(req[http::field::transfer_encoding]);
    boost::beast::string_view last;
    for (const auto& coding : codings) last = coding;
    if (!boost::beast::iequals(last, "chunked")) {
      return "Transfer-Encoding: only chunked, last, is taken";
    }
  }
  return std::nullopt;
}

}  // namespace headroom::net
