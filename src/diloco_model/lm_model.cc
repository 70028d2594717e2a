#include "diloco_model/lm_model.h"

#include <fmt/format.h>

#include <stdexcept>

namespace headroom::diloco {
namespace {

class LmModel final : public Model {
 public:
  LmModel(const lm::Corpus& corpus, const LmModelOptions& o, const lm::ModelConfig& config)
      : corpus_(corpus),
        o_(o),
        lm_(config, o.adamw, o.seed, o.threads),
        val_(lm::ValidationBatches(corpus.val, o.val_windows, 16, o.seq_len)) {}

  std::size_t parameter_count() const override { return lm_.parameter_count(); }
  std::uint64_t tokens_per_step() const override {
    return static_cast<std::uint64_t>(o_.batch) * static_cast<std::uint64_t>(o_.seq_len);
  }
  void SetDataStream(std::uint64_t stream) override {
    sampler_ =
        std::make_unique<lm::BatchSampler>(corpus_.train, o_.batch, o_.seq_len, o_.seed, stream);
  }
  double TrainStep() override { return lm_.TrainStep(sampler_->Next()); }
  double Gradient(std::vector<float>& grad_out) override {
    return lm_.Gradient(sampler_->Next(), grad_out);
  }
  void ApplyGradient(std::span<const float> grad) override { lm_.ApplyGradient(grad); }
  double ValidationLoss() override { return lm::ValidationLoss(lm_, val_); }
  void GetParameters(std::vector<float>& out) const override { lm_.GetParameters(out); }
  void SetParameters(std::span<const float> values) override { lm_.SetParameters(values); }
  OptimizerState GetOptimizerState() const override {
    lm::OptimizerState s = lm_.GetOptimizerState();
    return {s.schedule_step, s.adam_step, std::move(s.exp_avg), std::move(s.exp_avg_sq)};
  }
  Status SetOptimizerState(const OptimizerState& state) override {
    lm::OptimizerState s;
    s.schedule_step = static_cast<long>(state.schedule_step);
    s.adam_step = state.adam_step;
    s.exp_avg = state.exp_avg;
    s.exp_avg_sq = state.exp_avg_sq;
    try {
      lm_.SetOptimizerState(s);
    } catch (const std::invalid_argument& e) {
      return Error::Usage(e.what());
    }
    return OkStatus();
  }
  void SetThreads(int threads) override { lm::SetThreads(threads); }

 private:
  const lm::Corpus& corpus_;
  const LmModelOptions o_;
  lm::ByteLm lm_;
  std::vector<lm::Batch> val_;
  std::unique_ptr<lm::BatchSampler> sampler_;
};

}  // namespace

ModelFactory LmModelFactory(const lm::Corpus& corpus, const LmModelOptions& options) {
  return [&corpus, options]() -> Result<std::unique_ptr<Model>> {
    auto config = lm::ModelByName(options.model);
    if (!config) return Error::Usage("--model: " + config.error().message());
    if (options.seq_len > config->max_seq_len) {
      return Error::Usage(fmt::format("--seq-len {} is longer than model {}'s {}", options.seq_len,
                                      options.model, config->max_seq_len));
    }
    return std::unique_ptr<Model>(std::make_unique<LmModel>(corpus, options, *config));
  };
}

}  // namespace headroom::diloco
