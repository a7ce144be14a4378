// A small next-byte classifier over the flat parameter buffer: the fast model for tests and
// simulations where a transformer would only cost time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "diloco/model.hpp"
#include "diloco/params.hpp"

namespace diloco {

/// Predicts token t+1 from the `context` input tokens ending at t (a Bengio-style n-gram MLP):
/// x = concat(emb[tok[t-context+1]], ..., emb[tok[t]]) (context·E), positions before the window
/// start read token 0; h = tanh(x · fc1.wᵀ + fc1.b) (hidden); logits = h · fc2.wᵀ + fc2.b (V);
/// mean cross-entropy over all B·T targets. E = cfg.n_embd, so every window position predicts.
/// Tensors: "emb" (V,E) layer -1 embedding; "fc1.w" (hidden, context·E), "fc1.b" layer 0;
/// "fc2.w" (V, hidden), "fc2.b" layer 1. Not thread-safe (owns its workspace).
template <class S>
class Mlp {
public:
  /// Throws std::invalid_argument naming the bad key ("model.context: ...").
  explicit Mlp(const ModelConfig& cfg);

  const ModelConfig& config() const { return cfg_; }
  const ParamLayout& layout() const { return layout_; }
  /// emb ~ normal(0, 1), fc1.w ~ normal(0, 1/sqrt(context·E)), fc2.w ~ normal(0, init_std)
  /// (so the initial loss is ≈ ln V), biases 0; one stream per tensor derived from `seed`.
  void init(std::span<S> params, std::uint64_t seed) const;

  /// Mean cross-entropy; keeps activations for backward().
  S forward(std::span<const S> params, const Batch& batch);
  /// Overwrites `grads` with d(mean CE)/d(params) of the last forward().
  void backward(std::span<const S> params, std::span<S> grads);
  S loss_and_grad(std::span<const S> params, const Batch& batch, std::span<S> grads);
  S loss(std::span<const S> params, const Batch& batch);
  /// 6·(context·E·hidden + hidden·V): the two matmuls, forward and backward.
  double flops_per_token(int T) const;

private:
  void prepare(const Batch& batch);
  S run_forward(const S* p, bool keep_probs);

  ModelConfig cfg_;
  ParamLayout layout_;
  std::size_t emb_ = 0, fc1w_ = 0, fc1b_ = 0, fc2w_ = 0, fc2b_ = 0;  // offsets
  int N_ = 0;
  bool have_forward_ = false;
  std::vector<int> ctx_;      // (N, context) token ids feeding each prediction
  std::vector<int> targets_;  // (N)
  std::vector<S> x_;          // (N, context·E)
  std::vector<S> h_;          // (N, hidden) tanh output
  std::vector<S> logits_;     // (N, V) logits -> probs -> dlogits
  std::vector<S> dh_;         // (N, hidden)
  std::vector<S> dx_;         // (N, context·E)
};

extern template class Mlp<float>;
extern template class Mlp<double>;

}  // namespace diloco
