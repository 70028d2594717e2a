#include "report_page/diloco_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "report_page/format.h"
#include "report_page/html_page.h"
#include "report_page/svg.h"

namespace headroom::report {

using nlohmann::json;

std::string DilocoReportHtml(const json& s) {
  std::string body = fmt::format("<h2>Run {} ({})</h2>", HtmlEscape(s.value("run", "")),
                                 HtmlEscape(s.value("mode", "")));
  const auto num = [&s](const char* k) {
    if (!s.contains(k)) return std::string("-");
    return s[k].is_number() ? Number(s[k].get<double>()) : s[k].dump();
  };
  body += HtmlTable({"workers", "rounds", "H", "tokens", "final val loss", "bits/byte",
                     "bytes sent", "membership changes", "evictions", "hashes agreed", "overhead",
                     "energy J (compute / "
                     "coordination)"},
                    {{num("workers"), num("rounds"), num("inner_steps"), num("tokens"),
                      fmt::format("{:.4f}", s.value("final_val_loss", 0.0)),
                      fmt::format("{:.4f}", s.value("val_bits_per_byte", 0.0)),
                      num("bytes_sent_total"), num("membership_changes"), num("evictions"),
                      s.value("hashes_agreed", false) ? "yes, every round" : "NO",
                      fmt::format("{:.1f} %", 100.0 * s.value("overhead_fraction", 0.0)),
                      fmt::format("{:.0f} / {:.0f}", s["energy_j"].value("compute", 0.0),
                                  s["energy_j"].value("coordination", 0.0))}});
  if (s.contains("churn")) {
    const auto& c = s["churn"];
    body += fmt::format(
        "<p>Churn: {} SIGKILLed in round {}; the next round agreed {:.1f} s later; a fresh worker "
        "joined in round {}.</p>",
        HtmlEscape(c.value("killed", "")), c.value("killed_in_round", -1),
        c.value("next_round_after_s", -1.0), c.value("joined_in_round", -1));
  }
  std::vector<double> xs, ys;
  for (const auto& p : s.value("loss_curve", json::array())) {
    xs.push_back(p.value("tokens", 0.0));
    ys.push_back(p.value("val_loss", 0.0));
  }
  if (!xs.empty()) {
    const double hi = *std::max_element(ys.begin(), ys.end());
    const double lo = *std::min_element(ys.begin(), ys.end());
    SvgChart c({0.0, xs.back() * 1.02, false, "tokens (thousands)", 1000.0},
               {std::max(0.0, lo - 0.2), hi + 0.2, false, "validation loss (nats/byte)", 1.0});
    c.Line(xs, ys, "#1f77b4", "validation loss after each round");
    c.Points(xs, ys, "#1f77b4", "");
    body += "<h2>Validation loss</h2>" + c.Render();
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& w : s.value("workers_detail", json::array())) {
    const auto& t = w["seconds"];
    const double wall = t.value("wall", 0.0);
    const auto pct = [wall](double v) {
      return fmt::format("{:.1f} s ({:.0f} %)", v, wall > 0 ? 100.0 * v / wall : 0.0);
    };
    rows.push_back(
        {HtmlEscape(w.value("name", "")), fmt::format("{:.1f} s", wall),
         pct(t.value("compute", 0.0)), pct(t.value("communicate", 0.0)), pct(t.value("wait", 0.0)),
         pct(t.value("recover", 0.0)), std::to_string(w.value("bytes_sent", std::uint64_t{0})),
         std::to_string(w.value("rounds_contributed", 0)), std::to_string(w.value("resyncs", 0))});
  }
  body +=
      "<h2>Workers</h2>" + HtmlTable({"worker", "wall", "computing", "communicating", "waiting",
                                      "recovering", "bytes sent", "rounds contributed", "resyncs"},
                                     rows);
  body +=
      "<p>Definitions: docs/DILOCO.md (\"Accounting\"). Workers SIGKILLed on purpose leave "
      "no report and are not in this table.</p>";
  const std::string headline = fmt::format(
      "Final validation loss {:.4f} nats/byte ({:.4f} bits/byte) after {} tokens from {} workers "
      "in {} rounds; {}; overhead {:.1f} %.",
      s.value("final_val_loss", 0.0), s.value("val_bits_per_byte", 0.0),
      Number(s.value("tokens", 0.0)), s.value("workers", 0), s.value("rounds", 0),
      s.value("hashes_agreed", false) ? "every member's model hash agreed after every round"
                                      : "the members' model hashes did NOT agree",
      100.0 * s.value("overhead_fraction", 0.0));
  return Page("headroom diloco", HtmlEscape(headline), body);
}

}  // namespace headroom::report
