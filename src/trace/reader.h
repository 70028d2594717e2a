// Streaming trace readers: headroom's long CSV, wide CSV, and raw nvidia-smi logs.
//
// The reader validates every row it accepts (finite numbers, power >= 0, time non-decreasing per
// GPU, field counts) and hands samples to a SampleSink in batches, so memory does not grow with
// the length of the trace. A bad row ends the read with a one-line error naming file, line and
// column. An unterminated last line that does not parse (a trace still being written) is skipped
// with a warning.
//
// Not thread-safe: one reader per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "trace/schema.h"

namespace headroom::trace {

// Where trace bytes come from: a file, or memory (tests, fuzzing).
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads up to `capacity` bytes into `buffer`; returns 0 at the end.
  virtual Result<size_t> Read(char* buffer, size_t capacity) = 0;
  // The total size, when known (for progress display).
  virtual std::optional<uint64_t> SizeBytes() const { return std::nullopt; }
  // Zero-copy reading: up to `want` bytes from `offset` on (fewer only at the end; empty at the
  // end), valid until the next call. nullopt: this source cannot, use Read. A source that
  // views does so from offset 0 on, in increasing offsets.
  virtual Result<std::optional<std::string_view>> View(uint64_t offset, size_t want) {
    (void)offset;
    (void)want;
    return std::optional<std::string_view>();
  }
};

class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(std::string_view data) : data_(data) {}
  Result<size_t> Read(char* buffer, size_t capacity) override;
  std::optional<uint64_t> SizeBytes() const override { return data_.size(); }
  Result<std::optional<std::string_view>> View(uint64_t offset, size_t want) override;

 private:
  std::string_view data_;
  size_t offset_ = 0;
};

class FileSource final : public ByteSource {
 public:
  static Result<std::unique_ptr<FileSource>> Open(const std::string& path);
  ~FileSource() override;
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;

  Result<size_t> Read(char* buffer, size_t capacity) override;
  std::optional<uint64_t> SizeBytes() const override { return size_bytes_; }
  // A regular file is mapped a window at a time (no copy; the pages of one window at most are
  // mapped). If the file shrinks under the mapping, the next View says so instead of the
  // process dying of SIGBUS.
  Result<std::optional<std::string_view>> View(uint64_t offset, size_t want) override;

 private:
  FileSource(std::string path, int fd, std::optional<uint64_t> size_bytes)
      : path_(std::move(path)), fd_(fd), size_bytes_(size_bytes) {}
  void Unmap();
  std::string path_;
  int fd_;
  std::optional<uint64_t> size_bytes_;
  bool mappable_ = true;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
};

// Receives samples in batches, in file order.
class SampleSink {
 public:
  virtual ~SampleSink() = default;
  // `schema` is the reader's schema as of this batch (GPU ids seen so far included).
  virtual void OnBatch(const SampleBatch& batch, const TraceSchema& schema) = 0;
  // The reader hands its batch this way: a sink that keeps batches (ThreadedSink) may take it
  // by swapping its columns for empty ones of the same shape, which the reader then fills.
  // Default: OnBatch.
  virtual void TakeBatch(SampleBatch& batch, const TraceSchema& schema) { OnBatch(batch, schema); }
};

inline constexpr size_t kDefaultMaxLineBytes = size_t{1} << 20;
// GPUs one trace may name (--max-gpus raises it): a reader's memory grows with each GPU named,
// so a file of one row per GPU id, or a PromQL selector without a host filter on a large
// cluster, is refused with one line rather than exhausting memory.
inline constexpr size_t kDefaultMaxGpus = 4096;
inline constexpr size_t kMaxMaxGpus = 1'000'000;

struct ReadOptions {
  TraceFormat format = TraceFormat::kAuto;
  // nvidia-smi logs without an `index` column: the number of GPUs in one poll.
  int gpus_per_poll = 0;
  // A line longer than this is an error.
  size_t max_line_bytes = kDefaultMaxLineBytes;
  // A trace naming more GPUs than this is an error naming the GPU column and --max-gpus.
  size_t max_gpus = kDefaultMaxGpus;
  // Bytes per view for sources read in place (files are mapped this much at a time); at least
  // max_line_bytes + 2 is used.
  size_t view_bytes = size_t{4} << 20;
  // Samples per SampleSink::OnBatch call. 4032 = 2^6 x 3^2 x 7: a whole number of polls for
  // 1-4, 6-9, 12, 14, 16, 18, 21, 24, 28, 32, 36, 42, 48, 56 or 64 GPUs (see Analyzer).
  size_t batch_rows = 4032;
  // Called after every chunk with the bytes consumed so far.
  std::function<void(uint64_t bytes_done)> on_progress;
};

struct ReadSummary {
  TraceSchema schema;
  uint64_t rows = 0;     // data lines accepted
  uint64_t samples = 0;  // GPU samples produced (a wide row holds several)
  std::vector<std::string> warnings;
};

// "more than N GPUs ..., the bound on GPUs per trace (--max-gpus raises it)".
std::string TooManyGpusText(size_t max_gpus);

// Reads a whole trace. `name` is used in messages (the file path).
Result<ReadSummary> ReadTrace(ByteSource& source, std::string_view name, const ReadOptions& options,
                              SampleSink& sink);

// Opens `path` and reads it.
Result<ReadSummary> ReadTraceFile(const std::string& path, const ReadOptions& options,
                                  SampleSink& sink);

// A sink that keeps every sample, per GPU. For scope-sum analysis, fleets and tests.
class CollectingSink final : public SampleSink {
 public:
  struct Series {
    std::vector<double> t_s;
    std::vector<double> power_w;
    std::vector<double> tokens;    // empty unless the trace has tokens
    std::vector<double> budget_w;  // empty unless the trace has budgets; NaN where a row has none
  };
  void OnBatch(const SampleBatch& batch, const TraceSchema& schema) override;
  // Series per dense GPU index.
  std::vector<Series>& series() { return series_; }
  const std::vector<Series>& series() const { return series_; }

 private:
  std::vector<Series> series_;
};

}  // namespace headroom::trace
