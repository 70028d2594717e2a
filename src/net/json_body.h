// What every JSON request body must be before its fields are read, for both daemons: no NUL
// byte (a trailing one was accepted), well-formed UTF-8, and no key given twice in one object
// (the parser kept the last one). One line naming the byte or the field.
#pragma once

#include <cstddef>
#include <string_view>

#include "common/error.h"

namespace headroom::net {

// Offset of the first byte that is not part of well-formed UTF-8 (RFC 3629: no overlongs, no
// surrogates, nothing above U+10FFFF); npos when all is well formed.
size_t FirstInvalidUtf8(std::string_view s);

// An Input error: "body: a NUL byte at byte N", "field 'K': invalid UTF-8 at byte N" (or
// "body: invalid UTF-8 at byte N" outside any field), "field 'K': given twice". Text that is
// not JSON passes: the caller's parser says why, in its own words.
Status CheckJsonBody(std::string_view body);

}  // namespace headroom::net
