// GPT-2 style decoder-only byte transformer over one flat parameter buffer (llm.c's
// train_gpt2.c structure: named tensor views, X_forward/X_backward pairs, explicit workspace).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "diloco/model.hpp"
#include "diloco/params.hpp"

namespace diloco {

/// The byte-level GPT every chip trains: wte (V,C) + wpe (T,C); L pre-LayerNorm blocks of causal
/// multi-head self-attention (fused qkv) and a 4C GELU(tanh) MLP with residuals; final LayerNorm;
/// output head tied to wte; mean cross-entropy over all B·T targets.
/// S is float (training) or double (gradient checks). The object owns only activation workspace
/// (grown on demand, reused across calls), so it is not thread-safe: one instance per chip.
template <class S>
class Gpt {
public:
  /// Throws std::invalid_argument naming the bad key ("model.n_head: ...").
  explicit Gpt(const ModelConfig& cfg);

  const ModelConfig& config() const { return cfg_; }
  /// Tensor names: "wte", "wpe", "h.{l}.ln1.w|b", "h.{l}.attn.qkv.w|b", "h.{l}.attn.proj.w|b",
  /// "h.{l}.ln2.w|b", "h.{l}.mlp.fc.w|b", "h.{l}.mlp.proj.w|b", "lnf.w|b".
  const ParamLayout& layout() const { return layout_; }

  /// GPT-2 init from `seed`: matrices normal(0, init_std), residual projections (attn.proj.w,
  /// mlp.proj.w) scaled by 1/sqrt(2L), biases 0, LayerNorm weights 1. Each tensor draws from its
  /// own stream derived from (seed, tensor index), so float and double inits round the same draws.
  void init(std::span<S> params, std::uint64_t seed) const;

  /// Mean cross-entropy of the batch (B any, 1 ≤ T ≤ seq_len); keeps activations for backward().
  S forward(std::span<const S> params, const Batch& batch);
  /// Overwrites `grads` with d(mean CE)/d(params) of the last forward() (same params).
  void backward(std::span<const S> params, std::span<S> grads);
  /// forward() then backward(); returns the loss.
  S loss_and_grad(std::span<const S> params, const Batch& batch, std::span<S> grads);
  /// Mean cross-entropy only.
  S loss(std::span<const S> params, const Batch& batch);

  /// Forward+backward matmul FLOPs per target token for context T:
  ///   6·(12·L·C²)          weights of qkv, attn proj, fc, mlp proj (2 FLOPs/MAC fwd, 4 bwd)
  /// + 6·C·V                tied output head (the embedding lookup itself is free)
  /// + 6·L·C·(T+1)          causal attention: QKᵀ and P·V over on average (T+1)/2 keys,
  ///                        2·2·C·(T+1)/2 forward, twice that backward.
  /// Biases, LayerNorm, GELU, softmax are not counted (as in the 6N convention).
  double flops_per_token(int T) const;

private:
  struct LayerOffsets {
    std::size_t ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
  };
  void prepare(const Batch& batch);
  S run_forward(const S* p, bool training);

  ModelConfig cfg_;
  ParamLayout layout_;
  std::size_t wte_ = 0, wpe_ = 0, lnfw_ = 0, lnfb_ = 0;
  std::vector<LayerOffsets> lo_;

  // Workspace (llm.c's ActivationTensors, one flat buffer): sized for the current B·T.
  int B_ = 0, T_ = 0;
  bool have_forward_ = false;
  std::vector<int> inputs_, targets_;  // (B,T)
  std::vector<S> ws_;
  struct Acts {
    S* encoded;                      // (B,T,C)
    S *ln1, *ln1_mean, *ln1_rstd;    // (L,B,T,C) (L,B,T) (L,B,T)
    S* qkv;                          // (L,B,T,3C)
    S* att;                          // (L,B,NH,T,T) softmax probabilities
    S* atty;                         // (L,B,T,C)
    S* res2;                         // (L,B,T,C) residual after attention
    S *ln2, *ln2_mean, *ln2_rstd;    // (L,B,T,C) (L,B,T) (L,B,T)
    S* fch;                          // (L,B,T,4C) pre-GELU; GELU' of it after a training forward
    S* fch_gelu;                     // (L,B,T,4C)
    S* res3;                         // (L,B,T,C) residual after MLP
    S *lnf, *lnf_mean, *lnf_rstd;    // (B,T,C) (B,T) (B,T)
    S* logits;                       // (B,T,V) logits -> probs -> dlogits
    // backward scratch
    S* dres;                         // (B,T,C) gradient of the residual stream
    S* dln;                          // (B,T,C)
    S* datty;                        // (B,T,C)
    S* dqkv;                         // (B,T,3C)
    S* dfch;                         // (B,T,4C)
    S* dpreatt;                      // (T,T)
  } a_{};
};

extern template class Gpt<float>;
extern template class Gpt<double>;

}  // namespace diloco
