// A request parsed by Beast as the Api sees it: one conversion, for the server and the HTTP
// fuzzer. Views into `req`, which must outlive the ApiRequest.
#pragma once

// Boost 1.74's headers use std::exchange and std::optional without including them.
#include <optional>
#include <utility>

#include <boost/beast/http.hpp>
#include <string_view>

#include "agent/api.h"

namespace headroom::agent {

inline std::optional<std::string_view> BeastHeader(
    const boost::beast::http::request<boost::beast::http::string_body>& req,
    boost::beast::http::field field) {
  const auto it = req.find(field);
  if (it == req.end()) return std::nullopt;
  return std::string_view(it->value().data(), it->value().size());
}

inline ApiRequest ToApiRequest(
    const boost::beast::http::request<boost::beast::http::string_body>& req) {
  namespace http = boost::beast::http;
  ApiRequest r;
  r.method = std::string_view(req.method_string().data(), req.method_string().size());
  r.target = std::string_view(req.target().data(), req.target().size());
  r.host = BeastHeader(req, http::field::host);
  r.authorization = BeastHeader(req, http::field::authorization);
  r.content_type = BeastHeader(req, http::field::content_type);
  r.body = req.body();
  return r;
}

}  // namespace headroom::agent
