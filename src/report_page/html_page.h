// The page frame and table of every headroom HTML report.
#pragma once

#include <string>
#include <vector>

namespace headroom::report {

// `headline`: one sentence with the figure the report exists for, first under the title (HTML:
// the caller escapes what it puts in).
std::string Page(const std::string& title, const std::string& headline, const std::string& body);
// A table in its own horizontally scrolling box: a wide one never widens the page.
std::string HtmlTable(const std::vector<std::string>& header,
                      const std::vector<std::vector<std::string>>& rows);

}  // namespace headroom::report
