// The one file that includes libtorch (docs/DILOCO.md, "The model").
#include "lm/lm.h"

#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

namespace headroom::lm {

Result<ModelConfig> ModelByName(const std::string& name) {
  if (name == "tiny") return ModelConfig{"tiny", 128, 2, 4, 256};
  if (name == "small") return ModelConfig{"small", 256, 4, 8, 256};
  return Error::Usage("'" + name + "' is not a model (tiny, small)");
}

void SetThreads(int threads) {
  if (threads > 0) {
    torch::set_num_threads(threads);
  }
}

namespace {

constexpr int kVocab = 256;

struct BlockImpl : torch::nn::Module {
  BlockImpl(int d_model, int heads_in) : heads(heads_in) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_model})));
    qkv = register_module("qkv", torch::nn::Linear(d_model, 3 * d_model));
    proj = register_module("proj", torch::nn::Linear(d_model, d_model));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_model})));
    fc = register_module("fc", torch::nn::Linear(d_model, 4 * d_model));
    out = register_module("out", torch::nn::Linear(4 * d_model, d_model));
  }

  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask) {
    const auto b = x.size(0);
    const auto t = x.size(1);
    const auto d = x.size(2);
    const auto hd = d / heads;
    auto parts = qkv(ln1(x)).chunk(3, -1);
    auto q = parts[0].view({b, t, heads, hd}).transpose(1, 2);
    auto k = parts[1].view({b, t, heads, hd}).transpose(1, 2);
    auto v = parts[2].view({b, t, heads, hd}).transpose(1, 2);
    auto att = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));
    att = att.masked_fill(mask, -std::numeric_limits<float>::infinity()).softmax(-1);
    auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({b, t, d});
    auto h = x + proj(y);
    return h + out(torch::gelu(fc(ln2(h))));
  }

  std::int64_t heads;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, out{nullptr};
};
TORCH_MODULE(Block);

struct TransformerImpl : torch::nn::Module {
  explicit TransformerImpl(const ModelConfig& c) {
    tok = register_module("tok", torch::nn::Embedding(kVocab, c.d_model));
    pos = register_module("pos", torch::nn::Embedding(c.max_seq_len, c.d_model));
    for (int i = 0; i < c.layers; ++i) {
      blocks.push_back(register_module("block" + std::to_string(i), Block(c.d_model, c.heads)));
    }
    ln = register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})));
    head = register_module("head", torch::nn::Linear(c.d_model, kVocab));
    // GPT-2's initialisation: N(0, 0.02) weights, zero biases.
    torch::NoGradGuard no_grad;
    for (auto& p : named_parameters()) {
      if (p.key().find("ln") != std::string::npos) continue;  // LayerNorm keeps 1 and 0
      if (p.key().ends_with("bias")) {
        p.value().zero_();
      } else {
        p.value().normal_(0.0, 0.02);
      }
    }
  }

  torch::Tensor forward(const torch::Tensor& idx) {
    const auto t = idx.size(1);
    auto positions = torch::arange(t, torch::kLong);
    auto x = tok(idx) + pos(positions).unsqueeze(0);
    auto mask = torch::ones({t, t}, torch::kBool).triu(1);
    for (auto& b : blocks) x = b->forward(x, mask);
    return head(ln(x));
  }

  torch::nn::Embedding tok{nullptr}, pos{nullptr};
  std::vector<Block> blocks;
  torch::nn::LayerNorm ln{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Transformer);

}  // namespace

struct ByteLm::Impl {
  ModelConfig config;
  AdamWConfig adamw;
  Transformer model{nullptr};
  std::vector<torch::Tensor> params;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::size_t count = 0;
  long step = 0;

  void MakeOptimizer() {
    optimizer =
        std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(adamw.lr)
                                                          .betas({adamw.beta1, adamw.beta2})
                                                          .eps(adamw.eps)
                                                          .weight_decay(adamw.weight_decay));
    step = 0;
  }

  std::pair<torch::Tensor, torch::Tensor> Tensors(const Batch& b) const {
    if (b.seq_len > config.max_seq_len || b.seq_len < 1 || b.batch < 1 ||
        b.bytes.size() != static_cast<std::size_t>(b.batch) * (b.seq_len + 1)) {
      throw std::invalid_argument("batch: shape " + std::to_string(b.batch) + " x " +
                                  std::to_string(b.seq_len) + " does not fit the model or data");
    }
    auto all = torch::from_blob(const_cast<std::uint8_t*>(b.bytes.data()), {b.batch, b.seq_len + 1},
                                torch::kUInt8)
                   .to(torch::kLong);
    return {all.narrow(1, 0, b.seq_len), all.narrow(1, 1, b.seq_len)};
  }

  torch::Tensor LossOf(const Batch& b) {
    auto [x, y] = Tensors(b);
    auto logits = model->forward(x);
    return torch::nn::functional::cross_entropy(logits.view({-1, kVocab}), y.reshape({-1}));
  }

  void Step() {
    ++step;
    const double scale = adamw.warmup_steps > 0
                             ? std::min(1.0, static_cast<double>(step) / adamw.warmup_steps)
                             : 1.0;
    for (auto& group : optimizer->param_groups()) {
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(adamw.lr * scale);
    }
    torch::nn::utils::clip_grad_norm_(params, 1.0);
    optimizer->step();
  }
};

ByteLm::ByteLm(const ModelConfig& config, const AdamWConfig& adamw, std::uint64_t seed, int threads)
    : impl_(std::make_unique<Impl>()) {
  SetThreads(threads);
  if (config.d_model <= 0 || config.heads <= 0 || config.d_model % config.heads != 0 ||
      config.layers <= 0 || config.max_seq_len <= 0) {
    throw std::invalid_argument("model '" + config.name + "': inconsistent shape");
  }
  impl_->config = config;
  impl_->adamw = adamw;
  torch::manual_seed(seed);
  impl_->model = Transformer(config);
  impl_->params = impl_->model->parameters();
  for (const auto& p : impl_->params) impl_->count += static_cast<std::size_t>(p.numel());
  impl_->MakeOptimizer();
}

ByteLm::~ByteLm() = default;

const ModelConfig& ByteLm::config() const { return impl_->config; }
std::size_t ByteLm::parameter_count() const { return impl_->count; }

double ByteLm::TrainStep(const Batch& batch) {
  impl_->optimizer->zero_grad();
  auto loss = impl_->LossOf(batch);
  loss.backward();
  impl_->Step();
  return loss.item<double>();
}

double ByteLm::Gradient(const Batch& batch, std::vector<float>& grad_out) {
  impl_->optimizer->zero_grad();
  auto loss = impl_->LossOf(batch);
  loss.backward();
  grad_out.resize(impl_->count);
  std::size_t at = 0;
  for (const auto& p : impl_->params) {
    auto g = p.grad().contiguous();
    std::memcpy(grad_out.data() + at, g.data_ptr<float>(), sizeof(float) * g.numel());
    at += static_cast<std::size_t>(g.numel());
  }
  return loss.item<double>();
}

void ByteLm::ApplyGradient(std::span<const float> grad) {
  if (grad.size() != impl_->count) throw std::invalid_argument("gradient: wrong size");
  std::size_t at = 0;
  torch::NoGradGuard no_grad;
  for (auto& p : impl_->params) {
    auto n = p.numel();
    auto src = torch::from_blob(const_cast<float*>(grad.data() + at), p.sizes(), torch::kFloat);
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    p.mutable_grad().copy_(src);
    at += static_cast<std::size_t>(n);
  }
  impl_->Step();
}

double ByteLm::Loss(const Batch& batch) {
  torch::NoGradGuard no_grad;
  return impl_->LossOf(batch).item<double>();
}

void ByteLm::GetParameters(std::vector<float>& out) const {
  out.resize(impl_->count);
  std::size_t at = 0;
  for (const auto& p : impl_->params) {
    auto c = p.detach().contiguous();
    std::memcpy(out.data() + at, c.data_ptr<float>(), sizeof(float) * c.numel());
    at += static_cast<std::size_t>(c.numel());
  }
}

void ByteLm::SetParameters(std::span<const float> values) {
  if (values.size() != impl_->count) throw std::invalid_argument("parameters: wrong size");
  torch::NoGradGuard no_grad;
  std::size_t at = 0;
  for (auto& p : impl_->params) {
    auto src = torch::from_blob(const_cast<float*>(values.data() + at), p.sizes(), torch::kFloat);
    p.copy_(src);
    at += static_cast<std::size_t>(p.numel());
  }
}

namespace {
std::string StateKey(const torch::Tensor& p) {
  return c10::guts::to_string(p.unsafeGetTensorImpl());  // as torch::optim keys its state
}
}  // namespace

OptimizerState ByteLm::GetOptimizerState() const {
  OptimizerState s;
  s.schedule_step = impl_->step;
  s.exp_avg.assign(impl_->count, 0.0f);
  s.exp_avg_sq.assign(impl_->count, 0.0f);
  std::size_t at = 0;
  for (const auto& p : impl_->params) {
    const auto n = static_cast<std::size_t>(p.numel());
    auto it = impl_->optimizer->state().find(StateKey(p));
    if (it != impl_->optimizer->state().end()) {
      auto& st = static_cast<torch::optim::AdamWParamState&>(*it->second);
      s.adam_step = st.step();
      auto m = st.exp_avg().contiguous();
      auto v = st.exp_avg_sq().contiguous();
      std::memcpy(s.exp_avg.data() + at, m.data_ptr<float>(), 4 * n);
      std::memcpy(s.exp_avg_sq.data() + at, v.data_ptr<float>(), 4 * n);
    }
    at += n;
  }
  return s;
}

void ByteLm::SetOptimizerState(const OptimizerState& s) {
  if (s.exp_avg.size() != impl_->count || s.exp_avg_sq.size() != impl_->count) {
    throw std::invalid_argument("optimizer state: wrong size");
  }
  impl_->MakeOptimizer();
  impl_->step = s.schedule_step;
  if (s.adam_step == 0) return;  // no step taken yet: nothing to hold
  std::size_t at = 0;
  for (const auto& p : impl_->params) {
    auto st = std::make_unique<torch::optim::AdamWParamState>();
    st->step(s.adam_step);
    st->exp_avg(
        torch::from_blob(const_cast<float*>(s.exp_avg.data() + at), p.sizes(), torch::kFloat)
            .clone());
    st->exp_avg_sq(
        torch::from_blob(const_cast<float*>(s.exp_avg_sq.data() + at), p.sizes(), torch::kFloat)
            .clone());
    impl_->optimizer->state()[StateKey(p)] = std::move(st);
    at += static_cast<std::size_t>(p.numel());
  }
}

void ByteLm::ResetOptimizer(long step) {
  impl_->MakeOptimizer();
  impl_->step = step;
}

}  // namespace headroom::lm
