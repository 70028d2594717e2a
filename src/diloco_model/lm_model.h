#pragma once
// The byte-level transformer of `headroom diloco` (lm/lm.h, libtorch) behind the worker's model
// seam (diloco/model.h): a ByteLm, its inner AdamW, batches drawn from the corpus's training text
// on the worker's stream, and the validation windows of its held-out text.
#include <cstdint>

#include "diloco/model.h"
#include "lm/corpus.h"
#include "lm/lm.h"

namespace headroom::diloco {

struct LmModelOptions {
  std::string model = "tiny";  // lm::ModelByName
  int batch = 8;
  int seq_len = 128;
  int threads = 1;
  std::uint64_t seed = 1;
  int val_windows = 64;
  lm::AdamWConfig adamw;
};

// A factory of ByteLm models on `corpus` (which outlives every model it builds). Its models are
// checked when built: a usage error names an unknown model or a sequence longer than it knows.
ModelFactory LmModelFactory(const lm::Corpus& corpus, const LmModelOptions& options);

}  // namespace headroom::diloco
