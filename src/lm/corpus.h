#pragma once
// The byte corpus of `headroom diloco` (scripts/build_corpus.py writes DIR/train.txt and
// DIR/val.txt) and the batches drawn from it. Free of libtorch.
//
// Training windows: a worker draws window starts uniformly from the training bytes with its own
// generator (seed, stream): the same seed and stream give the same batches. Validation: the
// first `windows` non-overlapping windows of seq_len + 1 bytes of val.txt, always the same.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "lm/lm.h"

namespace headroom::lm {

struct Corpus {
  std::string dir;
  std::string train;
  std::string val;
};

// DIR/train.txt and DIR/val.txt; an error naming the file when one is missing or too short
// for a window of min_bytes.
Result<Corpus> LoadCorpus(const std::string& dir, std::size_t min_bytes);

class BatchSampler {
 public:
  BatchSampler(const std::string& text, int batch, int seq_len, std::uint64_t seed,
               std::uint64_t stream);
  Batch Next();

 private:
  const std::string& text_;
  int batch_;
  int seq_len_;
  std::mt19937_64 rng_;
};

// Validation batches of `batch` windows each, `windows` in all (fewer when val is short).
std::vector<Batch> ValidationBatches(const std::string& val, int windows, int batch, int seq_len);

// The mean loss over the validation batches (nats per byte); bits per byte = nats / ln 2.
double ValidationLoss(ByteLm& model, const std::vector<Batch>& batches);

}  // namespace headroom::lm
