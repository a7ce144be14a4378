// The n-gram MLP next-byte classifier: embedding lookup, one tanh hidden layer, softmax head.
#include "diloco/mlp.hpp"


#include <cmath>
#include <stdexcept>
#include <string>

#include "nn_kernels.hpp"

namespace diloco {
namespace {

void check(bool ok, const char* key, const std::string& what) {
  if (!ok) throw std::invalid_argument(std::string(key) + ": " + what);
}

ModelConfig validated(const ModelConfig& c) {
  check(c.vocab >= 2 && c.vocab <= kMaxVocab, "model.vocab", "must be in [2, 16777216]");
  check(c.n_embd >= 1, "model.n_embd", "must be >= 1");
  check(c.context >= 1, "model.context", "must be >= 1");
  check(c.hidden >= 1, "model.hidden", "must be >= 1");
  check(c.init_std > 0.0f && std::isfinite(c.init_std), "model.init_std", "must be > 0");
  return c;
}

}  // namespace

template <class S>
Mlp<S>::Mlp(const ModelConfig& cfg) : cfg_(validated(cfg)) {
  const auto V = static_cast<std::size_t>(cfg_.vocab);
  const auto E = static_cast<std::size_t>(cfg_.n_embd);
  const auto K = static_cast<std::size_t>(cfg_.context);
  const auto H = static_cast<std::size_t>(cfg_.hidden);
  emb_ = layout_[layout_.add("emb", {V, E}, -1, true, true)].offset;
  fc1w_ = layout_[layout_.add("fc1.w", {H, K * E}, 0, true)].offset;
  fc1b_ = layout_[layout_.add("fc1.b", {H}, 0, false)].offset;
  fc2w_ = layout_[layout_.add("fc2.w", {V, H}, 1, true)].offset;
  fc2b_ = layout_[layout_.add("fc2.b", {V}, 1, false)].offset;
}

template <class S>
void Mlp<S>::init(std::span<S> params, std::uint64_t seed) const {
  if (params.size() != layout_.size())
    throw std::invalid_argument("Mlp::init: params has the wrong size");
  const double fan_in = static_cast<double>(cfg_.context) * cfg_.n_embd;
  std::fill(params.begin(), params.end(), S(0));
  nn::fill_normal(layout_.view(params, 0), 1.0, seed, 0);
  nn::fill_normal(layout_.view(params, 1), 1.0 / std::sqrt(fan_in), seed, 1);
  nn::fill_normal(layout_.view(params, 3), static_cast<double>(cfg_.init_std), seed, 3);
}

template <class S>
void Mlp<S>::prepare(const Batch& batch) {
  if (batch.B < 1 || batch.T < 1) throw std::invalid_argument("batch: B and T must be >= 1");
  if (batch.tokens.size() != static_cast<std::size_t>(batch.B) * (batch.T + 1))
    throw std::invalid_argument("batch: tokens must hold B*(T+1) values");
  for (auto tok : batch.tokens)
    if (tok >= static_cast<std::uint32_t>(cfg_.vocab))
      throw std::invalid_argument("batch: token " + std::to_string(tok) +
                                  " >= model.vocab=" + std::to_string(cfg_.vocab));
  const int B = batch.B, T = batch.T, K = cfg_.context;
  const std::size_t N = static_cast<std::size_t>(B) * T;
  const std::size_t E = cfg_.n_embd, H = cfg_.hidden, V = cfg_.vocab;
  N_ = static_cast<int>(N);
  ctx_.resize(N * K);
  targets_.resize(N);
  for (int b = 0; b < B; ++b) {
    const std::uint32_t* row = batch.tokens.data() + static_cast<std::size_t>(b) * (T + 1);
    for (int t = 0; t < T; ++t) {
      const std::size_t n = static_cast<std::size_t>(b) * T + t;
      for (int j = 0; j < K; ++j) {
        const int pos = t - K + 1 + j;  // oldest first
        ctx_[n * K + j] = pos >= 0 ? static_cast<int>(row[pos]) : 0;
      }
      targets_[n] = static_cast<int>(row[t + 1]);
    }
  }
  x_.resize(N * K * E);
  h_.resize(N * H);
  logits_.resize(N * V);
  dh_.resize(N * H);
  dx_.resize(N * K * E);
}

template <class S>
S Mlp<S>::run_forward(const S* p, bool keep_probs) {
  const int N = N_, K = cfg_.context, E = cfg_.n_embd, H = cfg_.hidden, V = cfg_.vocab;
  // x (N, K·E): concatenated context embeddings
  for (std::size_t i = 0; i < static_cast<std::size_t>(N) * K; ++i)
    std::copy_n(p + emb_ + static_cast<std::size_t>(ctx_[i]) * E, E, x_.data() + i * E);
  nn::matmul_forward(h_.data(), x_.data(), p + fc1w_, p + fc1b_, N, K * E, H);  // (N,H)
  nn::Vec<S> h(h_.data(), static_cast<Eigen::Index>(h_.size()));
  h = h.tanh();
  nn::matmul_forward(logits_.data(), h_.data(), p + fc2w_, p + fc2b_, N, H, V);  // (N,V)
  const double sum = nn::crossentropy_forward(logits_.data(), targets_.data(), N, V, keep_probs);
  return static_cast<S>(sum / N);
}

template <class S>
S Mlp<S>::forward(std::span<const S> params, const Batch& batch) {
  if (params.size() != layout_.size())
    throw std::invalid_argument("Mlp::forward: params has the wrong size");
  prepare(batch);
  const S l = run_forward(params.data(), true);
  have_forward_ = true;
  return l;
}

template <class S>
void Mlp<S>::backward(std::span<const S> params, std::span<S> grads) {
  if (!have_forward_) throw std::logic_error("Mlp::backward: no forward() to differentiate");
  if (params.size() != layout_.size() || grads.size() != layout_.size())
    throw std::invalid_argument("Mlp::backward: params/grads have the wrong size");
  have_forward_ = false;
  const int N = N_, K = cfg_.context, E = cfg_.n_embd, H = cfg_.hidden, V = cfg_.vocab;
  const S* p = params.data();
  S* g = grads.data();
  std::fill(grads.begin(), grads.end(), S(0));
  nn::crossentropy_softmax_backward(logits_.data(), targets_.data(), N, V, S(1) / S(N));
  // logits = h · fc2ᵀ + b2
  nn::matmul_backward(dh_.data(), g + fc2w_, g + fc2b_, logits_.data(), h_.data(), p + fc2w_, N,
                      H, V);
  // h = tanh(pre): dpre = dh · (1 - h²)
  nn::Vec<S> dh(dh_.data(), static_cast<Eigen::Index>(dh_.size()));
  dh *= S(1) - nn::Vec<S>(h_.data(), static_cast<Eigen::Index>(h_.size())).square();
  // pre = x · fc1ᵀ + b1
  nn::matmul_backward(dx_.data(), g + fc1w_, g + fc1b_, dh_.data(), x_.data(), p + fc1w_, N,
                      K * E, H);
  // scatter dx into the embedding rows it was read from
  for (std::size_t i = 0; i < static_cast<std::size_t>(N) * K; ++i) {
    S* de = g + emb_ + static_cast<std::size_t>(ctx_[i]) * E;
    const S* d = dx_.data() + i * E;
    for (int e = 0; e < E; ++e) de[e] += d[e];
  }
}

template <class S>
S Mlp<S>::loss_and_grad(std::span<const S> params, const Batch& batch, std::span<S> grads) {
  const S l = forward(params, batch);
  backward(params, grads);
  return l;
}

template <class S>
S Mlp<S>::loss(std::span<const S> params, const Batch& batch) {
  if (params.size() != layout_.size())
    throw std::invalid_argument("Mlp::loss: params has the wrong size");
  prepare(batch);
  have_forward_ = false;
  return run_forward(params.data(), false);
}

template <class S>
double Mlp<S>::flops_per_token(int /*T*/) const {
  const double KE = static_cast<double>(cfg_.context) * cfg_.n_embd;
  return 6.0 * (KE * cfg_.hidden + static_cast<double>(cfg_.hidden) * cfg_.vocab);
}

template class Mlp<float>;
template class Mlp<double>;

}  // namespace diloco
