// The HTML report of `headroom diloco local` (docs/DILOCO.md): the summary's figures, the
// validation loss against tokens, and each worker's time computing, communicating, waiting and
// recovering. Reads the summary JSON that `local --json` prints, so this module needs nothing
// of the training code.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace headroom::report {

std::string DilocoReportHtml(const nlohmann::json& summary);

}  // namespace headroom::report
