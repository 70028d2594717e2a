// The HTML report of `headroom diloco local` (docs/DILOCO.md): the summary's figures, the
// validation loss against tokens, and each worker's time computing, communicating, waiting and
// recovering. Draws the run's summary (summary.json, diloco_core/run_report.h), so this module
// needs nothing of the training code.
#pragma once

#include <string>

#include "diloco_core/run_report.h"

namespace headroom::report {

std::string DilocoReportHtml(const diloco::RunSummaryFile& summary);

}  // namespace headroom::report
