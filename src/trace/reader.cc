#include "trace/reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <unordered_map>

#include "trace/number_parse.h"
#include "trace/row_parser.h"

namespace headroom::trace {

std::string TooManyGpusText(size_t max_gpus) {
  return fmt::format(
      "more than {} GPUs in the trace, the bound on GPUs per trace (--max-gpus raises it)",
      max_gpus);
}

using detail::kReadChunkBytes;
using detail::MakeParser;
using detail::RowParser;

const double* HundredthsTable() {
  static const std::vector<double> table = [] {
    std::vector<double> values(kHundredthsTableSize);
    for (size_t k = 0; k < values.size(); ++k) values[k] = static_cast<double>(k) / 100.0;
    return values;
  }();
  return table.data();
}

// ---------------------------------------------------------------------------------------------
// The driver's parts: the header, the last line, reading through views.

namespace {

Error TooLong(std::string_view name, int64_t line_no, const ReadOptions& options) {
  return Error::Input(LocatedMessage(
      name, line_no, 0, "", fmt::format("line longer than {} bytes", options.max_line_bytes)));
}

// The parser for the header line `header` (without its newline).
Result<std::unique_ptr<RowParser>> ParserForHeader(std::string_view header, std::string_view name,
                                                   const ReadOptions& options, SampleSink& sink,
                                                   ReadSummary& summary) {
  if (header.size() > options.max_line_bytes) return TooLong(name, 1, options);
  if (!header.empty() && header.back() == '\r') header.remove_suffix(1);
  return MakeParser(name, header, options, sink, summary);
}

// The end of a read: `rest` holds what followed the last newline (the header of a header-only
// file, or an unterminated last line).
Result<ReadSummary> FinishRead(std::unique_ptr<RowParser> parser, std::string rest,
                               uint64_t consumed, std::string_view name, const ReadOptions& options,
                               SampleSink& sink, ReadSummary& summary) {
  if (!parser) {
    if (rest.empty()) return Error::Input(fmt::format("{}: empty file (no header)", name));
    auto made = ParserForHeader(rest, name, options, sink, summary);
    if (!made) return std::move(made).error();
    return std::move(summary);
  }
  const size_t rest_bytes = rest.size();
  if (!rest.empty()) {
    rest += '\n';
    if (!parser->ParseLines(rest.data(), rest.data() + rest.size())) {
      summary.warnings.push_back(fmt::format(
          "{} (last line, no newline at the end: skipped as a trace still being written)",
          parser->error()));
    }
  }
  parser->Flush();
  if (options.on_progress) options.on_progress(consumed + rest_bytes);
  return std::move(summary);
}

// Reading through views: the source's bytes are parsed where they lie.
// `first` is the source's view from offset 0.
Result<ReadSummary> ReadViews(ByteSource& source, std::string_view first, std::string_view name,
                              const ReadOptions& options, SampleSink& sink, size_t window_bytes) {
  ReadSummary summary;
  std::unique_ptr<RowParser> parser;
  uint64_t offset = 0;
  std::string rest;
  std::optional<std::string_view> next = first;
  while (true) {
    if (!next) {
      auto viewed = source.View(offset, window_bytes);
      if (!viewed) return std::move(viewed).error();
      next = viewed->value_or(std::string_view());
    }
    const std::string_view view = *next;
    next.reset();
    if (offset == 0 && view.starts_with("\xEF\xBB\xBF")) {
      offset = 3;  // the BOM is not data
      continue;
    }
    if (view.empty()) break;
    const char* const base = view.data();
    const void* const last_nl = memrchr(base, '\n', view.size());
    if (last_nl == nullptr) {
      // A view shorter than asked for ends the source; window_bytes > max_line_bytes + 1.
      if (view.size() > options.max_line_bytes) {
        return TooLong(name, parser ? parser->line_no() + 1 : 1, options);
      }
      rest.assign(view);
      offset += view.size();
      // Once more: the source reports a file that changed under the copy.
      auto end = source.View(offset, 1);
      if (!end) return std::move(end).error();
      break;
    }
    const size_t stop = static_cast<size_t>(static_cast<const char*>(last_nl) - base) + 1;
    if (!parser) {
      const char* nl = static_cast<const char*>(std::memchr(base, '\n', stop));
      auto made = ParserForHeader(std::string_view(base, static_cast<size_t>(nl - base)), name,
                                  options, sink, summary);
      if (!made) return std::move(made).error();
      parser = std::move(made).value();
      offset += static_cast<uint64_t>(nl - base) + 1;
      continue;
    }
    if (!parser->ParseLines(base, base + stop)) return Error::Input(parser->error());
    offset += stop;
    if (options.on_progress) options.on_progress(offset);
  }
  const uint64_t consumed = offset - rest.size();
  return FinishRead(std::move(parser), std::move(rest), consumed, name, options, sink, summary);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The driver: whole lines to the parser, the header, the last line. Sources that can are read
// through views (no copy); others through BufferedViews, which gives the same views from Read.

namespace {

// Views over a source that can only Read: a buffer that holds the view asked for, refilled in
// chunks of kReadChunkBytes (which keeps the bytes being parsed in the L2 cache).
class BufferedViews final : public ByteSource {
 public:
  explicit BufferedViews(ByteSource& source) : source_(source) {}
  Result<size_t> Read(char*, size_t) override { return size_t{0}; }  // views only
  Result<std::optional<std::string_view>> View(uint64_t offset, size_t want) override {
    // What lies before `offset` is done with: the rest moves to the front.
    const size_t drop = static_cast<size_t>(std::min<uint64_t>(offset - base_, filled_));
    if (drop > 0) {
      std::memmove(buffer_.get(), buffer_.get() + drop, filled_ - drop);
      filled_ -= drop;
      base_ += drop;
    }
    if (want > capacity_) {
      std::unique_ptr<char[]> bigger(new char[want]);  // uninitialised: only what is read is
      if (filled_ > 0) std::memcpy(bigger.get(), buffer_.get(), filled_);
      buffer_ = std::move(bigger);
      capacity_ = want;
    }
    while (filled_ < want && !eof_) {
      auto n = source_.Read(buffer_.get() + filled_, std::min(want - filled_, kReadChunkBytes));
      if (!n) return std::move(n).error();
      if (*n == 0) eof_ = true;
      filled_ += *n;
    }
    return std::optional<std::string_view>(
        std::string_view(buffer_.get(), std::min(filled_, want)));
  }

 private:
  ByteSource& source_;
  std::unique_ptr<char[]> buffer_;
  size_t capacity_ = 0;
  size_t filled_ = 0;
  uint64_t base_ = 0;  // the source offset of buffer_[0]
  bool eof_ = false;
};

}  // namespace

Result<ReadSummary> ReadTrace(ByteSource& source, std::string_view name, const ReadOptions& options,
                              SampleSink& sink) {
  // A view holds at least one whole line of the longest allowed, or shows that it is too long.
  const size_t window_bytes = std::max(options.view_bytes, options.max_line_bytes + 2);
  auto viewed = source.View(0, window_bytes);
  if (!viewed) return std::move(viewed).error();
  if (viewed->has_value()) return ReadViews(source, **viewed, name, options, sink, window_bytes);
  // Read in chunks: a line of the longest allowed plus a chunk at a time.
  BufferedViews buffered(source);
  const size_t buffered_bytes = options.max_line_bytes + 2 + kReadChunkBytes;
  auto first = buffered.View(0, buffered_bytes);
  if (!first) return std::move(first).error();
  return ReadViews(buffered, **first, name, options, sink, buffered_bytes);
}

Result<ReadSummary> ReadTraceFile(const std::string& path, const ReadOptions& options,
                                  SampleSink& sink) {
  auto source = FileSource::Open(path);
  if (!source) return std::move(source).error();
  return ReadTrace(**source, path, options, sink);
}

void CollectingSink::OnBatch(const SampleBatch& batch, const TraceSchema& schema) {
  if (series_.size() < schema.gpu_ids.size()) series_.resize(schema.gpu_ids.size());
  const bool has_tokens = schema.Has(Field::kTokens);
  const auto& tokens = batch.fields[FieldIndex(Field::kTokens)];
  const bool has_budget = schema.Has(Field::kBudgetW);
  const auto& budget = batch.fields[FieldIndex(Field::kBudgetW)];
  for (size_t i = 0; i < batch.size(); ++i) {
    Series& s = series_[batch.gpu[i]];
    s.t_s.push_back(batch.t_s[i]);
    s.power_w.push_back(batch.power_w[i]);
    if (has_tokens) s.tokens.push_back(std::isnan(tokens[i]) ? 0.0 : tokens[i]);
    if (has_budget) s.budget_w.push_back(budget[i]);
  }
}

}  // namespace headroom::trace
