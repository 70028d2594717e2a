// The lines of a small text file (a schedule, a signals file): each with its 1-based number,
// a trailing CR removed, blank lines and '#' comments skipped. Stops at the first line `fn`
// refuses (returns false) and says whether every line was taken.
#pragma once

#include <cstddef>
#include <string_view>

namespace headroom {

template <class Fn>  // bool fn(size_t line_no, std::string_view line)
bool ForEachDataLine(std::string_view text, Fn&& fn) {
  size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    if (!fn(line_no, line)) return false;
  }
  return true;
}

}  // namespace headroom
