// Beast's parsed request as a net::Request, and the framing rules Beast's parser leaves open:
// one conversion for the server and the fuzzers.
#pragma once

// Boost 1.74's headers use std::exchange and std::optional without including them.
#include <optional>
#include <utility>

#include <boost/beast/http.hpp>
#include <string>
#include <string_view>

#include "net/http.h"

namespace headroom::net {

using BeastRequest = boost::beast::http::request<boost::beast::http::string_body>;

// Views into `req`, which must outlive the Request.
Request ToRequest(const BeastRequest& req);

// Once the header is parsed: why its framing is refused (400), or nullopt. Beast's parser
// already refuses differing Content-Lengths, a Transfer-Encoding after a Content-Length and
// control bytes in a value; this refuses the rest of what could let a proxy in front and this
// server disagree on where a request ends, or a check read another Host than the one routed:
// - Content-Length repeated, even with the same value, or not plain digits ("5, 5");
// - Host repeated;
// - Transfer-Encoding with a Content-Length (in either order), repeated, or not ending in
//   chunked;
// - a control byte (NUL, CR, LF, DEL, anything below 0x20 but HTAB) in a field.
std::optional<std::string> FramingError(const BeastRequest& req);

}  // namespace headroom::net
