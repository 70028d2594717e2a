#include "telemetry/replay_source.h"

#include <fmt/format.h>

#include <algorithm>

namespace headroom::telemetry {

Result<std::unique_ptr<ReplaySource>> ReplaySource::Open(const std::string& path,
                                                         const trace::ReadOptions& options) {
  trace::CollectingSink sink;
  auto summary = trace::ReadTraceFile(path, options, sink);
  if (!summary) return std::move(summary).error();
  auto series = std::move(sink.series());
  series.erase(
      std::remove_if(series.begin(), series.end(), [](const auto& s) { return s.t_s.empty(); }),
      series.end());
  if (series.empty()) return Error::Input(fmt::format("{}: no samples to replay", path));
  return std::make_unique<ReplaySource>(std::move(series));
}

ReplaySource::ReplaySource(std::vector<trace::CollectingSink::Series> series)
    : series_(std::move(series)), cursor_(series_.size(), 0) {
  start_s_ = series_.front().t_s.front();
  end_s_ = series_.front().t_s.back();
  for (const auto& s : series_) {
    start_s_ = std::min(start_s_, s.t_s.front());
    end_s_ = std::max(end_s_, s.t_s.back());
  }
}

Result<Sample> ReplaySource::Read(double t_s) {
  const double t = start_s_ + t_s;
  if (t > end_s_ + 1e-9) {
    return Error::Io(fmt::format("replay: the trace ended at {:.1f} s", end_s_ - start_s_));
  }
  Sample out;
  out.t_s = t_s;
  out.gpus.resize(series_.size());
  for (size_t g = 0; g < series_.size(); ++g) {
    const auto& s = series_[g];
    size_t& c = cursor_[g];
    if (c < s.t_s.size() && s.t_s[c] > t) c = 0;  // time went back: search from the start
    while (c + 1 < s.t_s.size() && s.t_s[c + 1] <= t + 1e-9) ++c;
    if (s.t_s[c] <= t + 1e-9) out.gpus[g].power_w = s.power_w[c];  // before its first: empty
  }
  return out;
}

}  // namespace headroom::telemetry
