#include "lm/corpus.h"

#include <fstream>
#include <iterator>
#include "common/read_file.h"

namespace headroom::lm {
namespace {

Result<std::string> ReadAll(const std::string& path, std::size_t min_bytes) {
  // A corpus is text of a few MB; 1 GiB bounds a device or a wrong path read whole.
  auto read = ReadFileCapped(path, std::size_t{1} << 30);
  if (!read) {
    return Error::Input(read.error().message() + " (build it with scripts/build_corpus.py)");
  }
  std::string text = std::move(*read);
  if (text.size() < min_bytes) {
    return Error::Input(path + ": " + std::to_string(text.size()) +
                        " bytes, fewer than one window of " + std::to_string(min_bytes));
  }
  return text;
}

}  // namespace

Result<Corpus> LoadCorpus(const std::string& dir, std::size_t min_bytes) {
  Corpus c;
  c.dir = dir;
  auto train = ReadAll(dir + "/train.txt", min_bytes);
  if (!train) return train.error();
  auto val = ReadAll(dir + "/val.txt", min_bytes);
  if (!val) return val.error();
  c.train = std::move(*train);
  c.val = std::move(*val);
  return c;
}

BatchSampler::BatchSampler(const std::string& text, int batch, int seq_len, std::uint64_t seed,
                           std::uint64_t stream)
    : text_(text), batch_(batch), seq_len_(seq_len), rng_(seed * 0x9E3779B97F4A7C15ULL + stream) {}

Batch BatchSampler::Next() {
  Batch b;
  b.batch = batch_;
  b.seq_len = seq_len_;
  const std::size_t window = static_cast<std::size_t>(seq_len_) + 1;
  b.bytes.resize(static_cast<std::size_t>(batch_) * window);
  const std::uint64_t starts = text_.size() - window + 1;
  for (int i = 0; i < batch_; ++i) {
    const std::size_t at = static_cast<std::size_t>(rng_() % starts);
    for (std::size_t j = 0; j < window; ++j) {
      b.bytes[i * window + j] = static_cast<std::uint8_t>(text_[at + j]);
    }
  }
  return b;
}

std::vector<Batch> ValidationBatches(const std::string& val, int windows, int batch, int seq_len) {
  const std::size_t window = static_cast<std::size_t>(seq_len) + 1;
  const int available = static_cast<int>(val.size() / window);
  const int n = std::min(windows, available);
  std::vector<Batch> out;
  for (int start = 0; start < n; start += batch) {
    Batch b;
    b.batch = std::min(batch, n - start);
    b.seq_len = seq_len;
    b.bytes.resize(static_cast<std::size_t>(b.batch) * window);
    for (std::size_t i = 0; i < b.bytes.size(); ++i) {
      b.bytes[i] = static_cast<std::uint8_t>(val[start * window + i]);
    }
    out.push_back(std::move(b));
  }
  return out;
}

double ValidationLoss(ByteLm& model, const std::vector<Batch>& batches) {
  double sum = 0.0;
  double weight = 0.0;
  for (const auto& b : batches) {
    sum += model.Loss(b) * b.batch;
    weight += b.batch;
  }
  return weight > 0.0 ? sum / weight : 0.0;
}

}  // namespace headroom::lm
