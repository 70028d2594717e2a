#include "report_page/diloco_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "report_page/format.h"
#include "report_page/html_page.h"
#include "report_page/svg.h"

namespace headroom::report {

namespace {

template <class T>
std::string Count(T n) {
  return Number(static_cast<double>(n));
}

// The figures' table.
std::string FiguresTable(const diloco::RunTotals& t) {
  return HtmlTable(
      {"workers", "rounds", "H", "tokens", "final val loss", "bits/byte", "bytes sent",
       "membership changes", "evictions", "hashes agreed", "overhead",
       "energy J (compute / coordination)"},
      {{Count(t.workers), Count(t.rounds), Count(t.inner_steps), Count(t.tokens),
        fmt::format("{:.4f}", t.final_val_loss),
        fmt::format("{:.4f}", t.final_val_loss / diloco::kLn2), Count(t.bytes_sent_total),
        Count(t.membership_changes), Count(t.evictions),
        t.hashes_agreed ? "yes, every round" : "NO",
        fmt::format("{:.1f} %", 100.0 * t.overhead_fraction),
        fmt::format("{:.0f} / {:.0f}", t.energy_j.compute, t.energy_j.coordination())}});
}

std::string WorkersTable(const std::vector<diloco::WorkerRow>& workers) {
  std::vector<std::vector<std::string>> rows;
  for (const diloco::WorkerRow& w : workers) {
    const double wall = w.seconds.wall;
    const auto pct = [wall](double v) {
      return fmt::format("{:.1f} s ({:.0f} %)", v, wall > 0 ? 100.0 * v / wall : 0.0);
    };
    rows.push_back({HtmlEscape(w.name), fmt::format("{:.1f} s", wall), pct(w.seconds.compute),
                    pct(w.seconds.communicate), pct(w.seconds.wait), pct(w.seconds.recover),
                    std::to_string(w.bytes_sent), std::to_string(w.rounds_contributed),
                    std::to_string(w.resyncs)});
  }
  return "<h2>Workers</h2>" +
         HtmlTable({"worker", "wall", "computing", "communicating", "waiting", "recovering",
                    "bytes sent", "rounds contributed", "resyncs"},
                   rows);
}

// The energy split (docs/DILOCO.md, "Energy to a target loss"), and to_target where asked.
std::string EnergyParagraph(const diloco::RunTotals& t) {
  const diloco::EnergyJ& e = t.energy_j;
  std::string out = fmt::format(
      "<p>Energy: {:.0f} J compute, {:.0f} J network, {:.0f} J idle while waiting, {:.0f} J "
      "other CPU (coordination {:.1f} % of {:.0f} J). Measured CPU seconds, waiting seconds and "
      "bytes times modelled watts and J/byte; a CPU-scale model on this machine.",
      e.compute, e.network, e.idle, e.other_cpu,
      e.total() > 0 ? 100.0 * e.coordination() / e.total() : 0.0, e.total());
  if (t.to_target) {
    const diloco::ToTarget& g = *t.to_target;
    out += g.reached ? fmt::format(" To validation loss {:.4f}: {} tokens, {:.1f} s, {:.0f} J.",
                                   g.target_loss, Count(g.tokens), g.wall_s, g.energy_j)
                     : fmt::format(" Validation loss {:.4f} was not reached.", g.target_loss);
  }
  return out + "</p>";
}

}  // namespace

std::string DilocoReportHtml(const diloco::RunSummaryFile& s) {
  const diloco::RunTotals& t = s.totals;
  std::string body = fmt::format("<h2>Run {} ({})</h2>", HtmlEscape(t.run), HtmlEscape(t.mode));
  body += FiguresTable(t);
  body += EnergyParagraph(t);
  if (s.churn) {
    const diloco::ChurnFigures& c = *s.churn;
    body += fmt::format(
        "<p>Churn: {} SIGKILLed in round {}; the next round agreed {:.1f} s later; a fresh worker "
        "joined in round {}.</p>",
        HtmlEscape(c.killed), c.killed_in_round, c.next_round_after_s, c.joined_in_round);
  }
  std::vector<double> xs, ys;
  for (const diloco::LossPoint& p : t.loss_curve) {
    xs.push_back(static_cast<double>(p.tokens));
    ys.push_back(p.val_loss);
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
  body += WorkersTable(s.workers_detail);
  body +=
      "<p>Definitions: docs/DILOCO.md (\"Accounting\"). Workers SIGKILLed on purpose leave "
      "no report and are not in this table.</p>";
  const std::string headline = fmt::format(
      "Final validation loss {:.4f} nats/byte ({:.4f} bits/byte) after {} tokens from {} workers "
      "in {} rounds; {}; overhead {:.1f} %.",
      t.final_val_loss, t.final_val_loss / diloco::kLn2, Number(static_cast<double>(t.tokens)),
      t.workers, t.rounds,
      t.hashes_agreed ? "every member's model hash agreed after every round"
                      : "the members' model hashes did NOT agree",
      100.0 * t.overhead_fraction);
  return Page("headroom diloco", HtmlEscape(headline), body);
}

}  // namespace headroom::report
