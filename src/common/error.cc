#include "common/error.h"

#include <fmt/format.h>

namespace headroom {

std::string LocatedMessage(std::string_view file, int64_t line, int column, std::string_view field,
                           std::string_view reason) {
  std::string out = fmt::format("{}:{}", file, line);
  if (column > 0) out += fmt::format(":{}", column);
  out += ": ";
  if (!field.empty()) out += fmt::format("column '{}': ", field);
  out += reason;
  return out;
}

}  // namespace headroom
