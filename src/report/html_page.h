// The page frame and table of every headroom HTML report.
#pragma once

#include <string>
#include <vector>

namespace headroom::report {

std::string Page(const std::string& title, const std::string& body);
std::string HtmlTable(const std::vector<std::string>& header,
                      const std::vector<std::vector<std::string>>& rows);

}  // namespace headroom::report
