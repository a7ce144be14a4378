// GPT-2 style byte transformer, forward and backward by hand (after llm.c's train_gpt2.c),
// on row-major Maps over the flat buffers: every matrix product on OpenBLAS (gemm.cpp), the linear
// layers' and the per-head attention's; the element-wise passes on Eigen.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"       // GCC 12 false positives inside Eigen's AVX-512
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized" // packet math (pexp_double), as in gemm.cpp
#endif
#include "diloco/gpt.hpp"


#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "nn_kernels.hpp"

namespace diloco {
namespace {

using nn::CVec;
using nn::Vec;

void check(bool ok, const char* key, const std::string& what) {
  if (!ok) throw std::invalid_argument(std::string(key) + ": " + what);
}

ModelConfig validated(const ModelConfig& c) {
  check(c.vocab >= 2 && c.vocab <= kMaxVocab, "model.vocab", "must be in [2, 16777216]");
  check(c.seq_len >= 1, "model.seq_len", "must be >= 1");
  check(c.n_layer >= 1, "model.n_layer", "must be >= 1");
  check(c.n_head >= 1, "model.n_head", "must be >= 1");
  check(c.n_embd >= 1, "model.n_embd", "must be >= 1");
  check(c.n_embd % c.n_head == 0, "model.n_embd",
        "must be divisible by model.n_head (" + std::to_string(c.n_head) + ")");
  check(c.init_std > 0.0f && std::isfinite(c.init_std), "model.init_std", "must be > 0");
  return c;
}

// ---------------------------------------------------------------------------------------------
// encoder: x = wte[token] + wpe[t]

template <class S>
void encoder_forward(S* out, const int* inp, const S* wte, const S* wpe, int B, int T, int C) {
  // out (B,T,C), inp (B,T), wte (V,C), wpe (maxT,C)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      S* o = out + (static_cast<std::size_t>(b) * T + t) * C;
      const S* we = wte + static_cast<std::size_t>(inp[b * T + t]) * C;
      const S* pe = wpe + static_cast<std::size_t>(t) * C;
      for (int i = 0; i < C; ++i) o[i] = we[i] + pe[i];
    }
}

template <class S>
void encoder_backward(S* dwte, S* dwpe, const S* dout, const int* inp, int B, int T, int C) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const S* d = dout + (static_cast<std::size_t>(b) * T + t) * C;
      S* dwe = dwte + static_cast<std::size_t>(inp[b * T + t]) * C;
      S* dpe = dwpe + static_cast<std::size_t>(t) * C;
      for (int i = 0; i < C; ++i) {
        dwe[i] += d[i];
        dpe[i] += d[i];
      }
    }
}

// ---------------------------------------------------------------------------------------------
// layernorm over the last dimension, eps = 1e-5

template <class S>
void layernorm_forward(S* out, S* mean, S* rstd, const S* inp, const S* w, const S* b, int N,
                       int C) {
  // out (N,C), mean (N), rstd (N), inp (N,C), w (C), b (C)
  CVec<S> wv(w, C), bv(b, C);
  for (int n = 0; n < N; ++n) {
    CVec<S> x(inp + static_cast<std::size_t>(n) * C, C);
    Vec<S> o(out + static_cast<std::size_t>(n) * C, C);
    const S m = x.mean();
    const S var = (x - m).square().mean();
    const S r = S(1) / std::sqrt(var + S(1e-5));
    o = (x - m) * r * wv + bv;
    mean[n] = m;
    rstd[n] = r;
  }
}

template <class S>
void layernorm_backward(S* dinp, S* dw, S* db, const S* dout, const S* inp, const S* w,
                        const S* mean, const S* rstd, int N, int C) {
  // dinp (N,C) +=, dw (C) +=, db (C) +=
  CVec<S> wv(w, C);
  Vec<S> dwv(dw, C), dbv(db, C);
  for (int n = 0; n < N; ++n) {
    CVec<S> x(inp + static_cast<std::size_t>(n) * C, C);
    CVec<S> d(dout + static_cast<std::size_t>(n) * C, C);
    Vec<S> di(dinp + static_cast<std::size_t>(n) * C, C);
    const S m = mean[n], r = rstd[n];
    // norm = (x - m) * r ; dnorm = d * w
    const S dnorm_mean = (d * wv).mean();
    const S dnorm_norm_mean = (d * wv * (x - m)).mean() * r;
    dbv += d;
    dwv += d * (x - m) * r;
    di += r * (d * wv - dnorm_mean - (x - m) * (r * dnorm_norm_mean));
  }
}

// ---------------------------------------------------------------------------------------------
// causal multi-head self-attention over the fused qkv buffer

template <class S>
void attention_forward(S* out, S* att, const S* qkv, int B, int T, int C, int NH) {
  // out (B,T,C), att (B,NH,T,T), qkv (B,T,3C) = [q | k | v], each C = NH heads of hs
  const int hs = C / NH;
  const S scale = S(1) / std::sqrt(static_cast<S>(hs));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      // q, k, v (T,hs) at row stride 3C in qkv; the products run on the models' GEMM.
      const S* q = qkv + static_cast<std::size_t>(b) * T * 3 * C + h * hs;
      const S* k = q + C;
      const S* v = q + 2 * C;
      S* a = att + (static_cast<std::size_t>(b) * NH + h) * T * T;
      nn::gemm(false, true, T, T, hs, scale, q, 3 * C, k, 3 * C, S(0), a, T);  // p (T,T) = scale·q·kᵀ
      for (int i = 0; i < T; ++i) {
        Vec<S> row(a + static_cast<std::size_t>(i) * T, i + 1);
        const S m = row.maxCoeff();
        row = (row - m).exp();
        row *= S(1) / row.sum();
        std::memset(a + static_cast<std::size_t>(i) * T + i + 1, 0, sizeof(S) * (T - i - 1));
      }
      // y (T,hs) at row stride C = p·v; p is zero above its diagonal (a plain product is faster
      // than a triangular one at these sizes)
      nn::gemm(false, false, T, hs, T, S(1), a, T, v, 3 * C, S(0), out + static_cast<std::size_t>(b) * T * C + h * hs, C);
    }
}

template <class S>
void attention_backward(S* dqkv, S* dpreatt, const S* dout, const S* qkv, const S* att, int B,
                        int T, int C, int NH) {
  // dqkv (B,T,3C) overwritten, dpreatt (T,T) scratch, dout (B,T,C), att (B,NH,T,T)
  const int hs = C / NH;
  const S scale = S(1) / std::sqrt(static_cast<S>(hs));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const std::size_t off = static_cast<std::size_t>(b) * T * 3 * C + h * hs;
      const S* q = qkv + off;  // (T,hs) at row stride 3C, as k, v and their gradients
      const S* k = q + C;
      const S* v = q + 2 * C;
      S* dq = dqkv + off;
      S* dk = dq + C;
      S* dv = dq + 2 * C;
      const S* dy = dout + static_cast<std::size_t>(b) * T * C + h * hs;  // (T,hs) at row stride C
      const S* a = att + (static_cast<std::size_t>(b) * NH + h) * T * T;
      nn::gemm(true, false, T, hs, T, S(1), a, T, dy, C, S(0), dv, 3 * C);        // dv = pᵀ·dy
      nn::gemm(false, true, T, T, hs, S(1), dy, C, v, 3 * C, S(0), dpreatt, T);  // dp = dy·vᵀ (causal part used)
      // softmax backward, row i over j ≤ i: ds = p ∘ (dp - Σ_j p·dp), times the 1/sqrt(hs) scale
      for (int i = 0; i < T; ++i) {
        CVec<S> prow(a + static_cast<std::size_t>(i) * T, i + 1);
        Vec<S> drow(dpreatt + static_cast<std::size_t>(i) * T, i + 1);
        const S dot = (prow * drow).sum();
        drow = prow * (drow - dot) * scale;
        std::memset(dpreatt + static_cast<std::size_t>(i) * T + i + 1, 0,
                    sizeof(S) * (T - i - 1));
      }
      // dq (T,hs) = ds · k ; dk (T,hs) = dsᵀ · q (ds is zero above its diagonal)
      nn::gemm(false, false, T, hs, T, S(1), dpreatt, T, k, 3 * C, S(0), dq, 3 * C);
      nn::gemm(true, false, T, hs, T, S(1), dpreatt, T, q, 3 * C, S(0), dk, 3 * C);
    }
}

// ---------------------------------------------------------------------------------------------
// GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))

// With `deriv` (a training forward), inp is overwritten by GELU'(inp): the backward pass is then
// one product, and the tanh is computed once per step instead of twice.
template <class S>
void gelu_forward(S* out, S* inp, std::size_t n, bool deriv) {
  const S k = static_cast<S>(0.7978845608028654);
  const S c = static_cast<S>(0.044715);
  constexpr std::size_t chunk = 1024;  // keeps the tanh temporary in L1 without allocating
  alignas(64) S th[chunk];
  for (std::size_t s = 0; s < n; s += chunk) {
    const auto m = static_cast<Eigen::Index>(std::min(chunk, n - s));
    Vec<S> x(inp + s, m);
    Vec<S> t(th, m);
    t = (k * (x + c * x.cube())).tanh();
    Vec<S>(out + s, m) = S(0.5) * x * (S(1) + t);
    // Element-wise, each x read before its own place is written.
    if (deriv) x = S(0.5) * (S(1) + t) + S(0.5) * x * (S(1) - t.square()) * k * (S(1) + S(3) * c * x.square());
  }
}

template <class S>
void gelu_backward(S* dinp, const S* deriv, const S* dout, std::size_t n) {
  // dinp may alias dout (element-wise)
  const auto m = static_cast<Eigen::Index>(n);
  Vec<S>(dinp, m) = CVec<S>(dout, m) * CVec<S>(deriv, m);
}

void require_batch(const Batch& batch, int seq_len, int vocab) {
  if (batch.B < 1) throw std::invalid_argument("batch: B must be >= 1");
  if (batch.T < 1 || batch.T > seq_len)
    throw std::invalid_argument("batch: T=" + std::to_string(batch.T) +
                                " must be in [1, model.seq_len=" + std::to_string(seq_len) + "]");
  if (batch.tokens.size() != static_cast<std::size_t>(batch.B) * (batch.T + 1))
    throw std::invalid_argument("batch: tokens must hold B*(T+1) values");
  for (auto tok : batch.tokens)
    if (tok >= static_cast<std::uint32_t>(vocab))
      throw std::invalid_argument("batch: token " + std::to_string(tok) +
                                  " >= model.vocab=" + std::to_string(vocab));
}

}  // namespace

// ---------------------------------------------------------------------------------------------

template <class S>
Gpt<S>::Gpt(const ModelConfig& cfg) : cfg_(validated(cfg)) {
  const auto V = static_cast<std::size_t>(cfg_.vocab);
  const auto C = static_cast<std::size_t>(cfg_.n_embd);
  const auto maxT = static_cast<std::size_t>(cfg_.seq_len);
  const int L = cfg_.n_layer;
  wte_ = layout_.add("wte", {V, C}, -1, true, true);
  wpe_ = layout_.add("wpe", {maxT, C}, -1, true, true);
  for (int l = 0; l < L; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    LayerOffsets o{};
    o.ln1w = layout_.add(h + "ln1.w", {C}, l, false);
    o.ln1b = layout_.add(h + "ln1.b", {C}, l, false);
    o.qkvw = layout_.add(h + "attn.qkv.w", {3 * C, C}, l, true);
    o.qkvb = layout_.add(h + "attn.qkv.b", {3 * C}, l, false);
    o.projw = layout_.add(h + "attn.proj.w", {C, C}, l, true);
    o.projb = layout_.add(h + "attn.proj.b", {C}, l, false);
    o.ln2w = layout_.add(h + "ln2.w", {C}, l, false);
    o.ln2b = layout_.add(h + "ln2.b", {C}, l, false);
    o.fcw = layout_.add(h + "mlp.fc.w", {4 * C, C}, l, true);
    o.fcb = layout_.add(h + "mlp.fc.b", {4 * C}, l, false);
    o.fcprojw = layout_.add(h + "mlp.proj.w", {C, 4 * C}, l, true);
    o.fcprojb = layout_.add(h + "mlp.proj.b", {C}, l, false);
    lo_.push_back(o);
  }
  lnfw_ = layout_.add("lnf.w", {C}, L, false);
  lnfb_ = layout_.add("lnf.b", {C}, L, false);
  // Tensor indices -> offsets (the layout is fixed from here on).
  auto off = [&](std::size_t i) { return layout_[i].offset; };
  wte_ = off(wte_);
  wpe_ = off(wpe_);
  lnfw_ = off(lnfw_);
  lnfb_ = off(lnfb_);
  for (auto& o : lo_)
    for (std::size_t* f : {&o.ln1w, &o.ln1b, &o.qkvw, &o.qkvb, &o.projw, &o.projb, &o.ln2w,
                           &o.ln2b, &o.fcw, &o.fcb, &o.fcprojw, &o.fcprojb})
      *f = off(*f);
}

template <class S>
void Gpt<S>::init(std::span<S> params, std::uint64_t seed) const {
  if (params.size() != layout_.size())
    throw std::invalid_argument("Gpt::init: params has the wrong size");
  const double std0 = cfg_.init_std;
  const double std_resid = std0 / std::sqrt(2.0 * cfg_.n_layer);
  const auto& ts = layout_.tensors();
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const TensorSpec& t = ts[i];
    auto v = layout_.view(params, i);
    auto ends_with = [&](const char* suf) {
      const std::string s(suf);
      return t.name.size() >= s.size() && t.name.compare(t.name.size() - s.size(), s.size(), s) == 0;
    };
    if (t.shape.size() == 2) {
      const bool resid = ends_with("attn.proj.w") || ends_with("mlp.proj.w");
      nn::fill_normal(v, resid ? std_resid : std0, seed, i);
    } else if (ends_with("ln1.w") || ends_with("ln2.w") || t.name == "lnf.w") {
      std::fill(v.begin(), v.end(), S(1));
    } else {
      std::fill(v.begin(), v.end(), S(0));
    }
  }
}

template <class S>
void Gpt<S>::prepare(const Batch& batch) {
  require_batch(batch, cfg_.seq_len, cfg_.vocab);
  const int B = batch.B, T = batch.T;
  const std::size_t C = cfg_.n_embd, L = cfg_.n_layer, NH = cfg_.n_head, V = cfg_.vocab;
  const std::size_t N = static_cast<std::size_t>(B) * T;
  inputs_.resize(N);
  targets_.resize(N);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      inputs_[b * T + t] = static_cast<int>(batch.tokens[static_cast<std::size_t>(b) * (T + 1) + t]);
      targets_[b * T + t] = static_cast<int>(batch.tokens[static_cast<std::size_t>(b) * (T + 1) + t + 1]);
    }
  if (B == B_ && T == T_ && !ws_.empty()) return;
  // Lay out the workspace; each piece starts on a 64-byte boundary.
  const std::size_t sizes[] = {
      N * C,                                                // encoded
      L * N * C, L * N, L * N,                              // ln1, mean, rstd
      L * N * 3 * C,                                        // qkv
      L * static_cast<std::size_t>(B) * NH * T * T,         // att
      L * N * C, L * N * C,                                 // atty, res2
      L * N * C, L * N, L * N,                              // ln2, mean, rstd
      L * N * 4 * C, L * N * 4 * C, L * N * C,              // fch, fch_gelu, res3
      N * C, N, N,                                          // lnf, mean, rstd
      N * V,                                                // logits
      N * C, N * C, N * C, N * 3 * C, N * 4 * C,            // dres, dln, datty, dqkv, dfch
      static_cast<std::size_t>(T) * T,                      // dpreatt
  };
  constexpr std::size_t align = 64 / sizeof(S);
  std::size_t total = 0;
  for (std::size_t s : sizes) total += (s + align - 1) / align * align;
  ws_.resize(total + align);
  S* base = ws_.data();
  while (reinterpret_cast<std::uintptr_t>(base) % 64 != 0) ++base;
  S** ptrs[] = {&a_.encoded, &a_.ln1,    &a_.ln1_mean, &a_.ln1_rstd, &a_.qkv,      &a_.att,
                &a_.atty,    &a_.res2,   &a_.ln2,      &a_.ln2_mean, &a_.ln2_rstd, &a_.fch,
                &a_.fch_gelu, &a_.res3,  &a_.lnf,      &a_.lnf_mean, &a_.lnf_rstd, &a_.logits,
                &a_.dres,    &a_.dln,    &a_.datty,    &a_.dqkv,     &a_.dfch,     &a_.dpreatt};
  static_assert(std::size(ptrs) == std::size(sizes));
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    *ptrs[i] = base;
    base += (sizes[i] + align - 1) / align * align;
  }
  B_ = B;
  T_ = T;
}

template <class S>
S Gpt<S>::run_forward(const S* p, bool training) {
  const int B = B_, T = T_, C = cfg_.n_embd, NH = cfg_.n_head, V = cfg_.vocab;
  const int L = cfg_.n_layer;
  const int N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  encoder_forward(a_.encoded, inputs_.data(), p + wte_, p + wpe_, B, T, C);  // (B,T,C)
  for (int l = 0; l < L; ++l) {
    const LayerOffsets& o = lo_[l];
    const S* res_in = l == 0 ? a_.encoded : a_.res3 + (l - 1) * NC;  // (B,T,C)
    S* ln1 = a_.ln1 + l * NC;                                         // (B,T,C)
    S* ln1_mean = a_.ln1_mean + l * N;                                // (B,T)
    S* ln1_rstd = a_.ln1_rstd + l * N;                                // (B,T)
    S* qkv = a_.qkv + l * 3 * NC;                                     // (B,T,3C)
    S* att = a_.att + static_cast<std::size_t>(l) * B * NH * T * T;   // (B,NH,T,T)
    S* atty = a_.atty + l * NC;                                       // (B,T,C)
    S* res2 = a_.res2 + l * NC;                                       // (B,T,C)
    S* ln2 = a_.ln2 + l * NC;                                         // (B,T,C)
    S* ln2_mean = a_.ln2_mean + l * N;                                // (B,T)
    S* ln2_rstd = a_.ln2_rstd + l * N;                                // (B,T)
    S* fch = a_.fch + l * 4 * NC;                                     // (B,T,4C)
    S* fch_gelu = a_.fch_gelu + l * 4 * NC;                           // (B,T,4C)
    S* res3 = a_.res3 + l * NC;                                       // (B,T,C)

    layernorm_forward(ln1, ln1_mean, ln1_rstd, res_in, p + o.ln1w, p + o.ln1b, N, C);
    nn::matmul_forward(qkv, ln1, p + o.qkvw, p + o.qkvb, N, C, 3 * C);
    attention_forward(atty, att, qkv, B, T, C, NH);
    nn::matmul_forward(res2, atty, p + o.projw, p + o.projb, N, C, C, res_in);
    layernorm_forward(ln2, ln2_mean, ln2_rstd, res2, p + o.ln2w, p + o.ln2b, N, C);
    nn::matmul_forward(fch, ln2, p + o.fcw, p + o.fcb, N, C, 4 * C);
    gelu_forward(fch_gelu, fch, 4 * NC, training);  // training: fch becomes GELU'(fch)
    nn::matmul_forward(res3, fch_gelu, p + o.fcprojw, p + o.fcprojb, N, 4 * C, C, res2);
  }
  const S* res_last = a_.res3 + (L - 1) * NC;
  layernorm_forward(a_.lnf, a_.lnf_mean, a_.lnf_rstd, res_last, p + lnfw_, p + lnfb_, N, C);
  nn::matmul_forward<S>(a_.logits, a_.lnf, p + wte_, nullptr, N, C, V);  // (B,T,V), tied head
  const double sum = nn::crossentropy_forward(a_.logits, targets_.data(), N, V, training);
  return static_cast<S>(sum / N);
}

template <class S>
S Gpt<S>::forward(std::span<const S> params, const Batch& batch) {
  if (params.size() != layout_.size())
    throw std::invalid_argument("Gpt::forward: params has the wrong size");
  prepare(batch);
  const S loss = run_forward(params.data(), true);
  have_forward_ = true;
  return loss;
}

template <class S>
void Gpt<S>::backward(std::span<const S> params, std::span<S> grads) {
  if (!have_forward_) throw std::logic_error("Gpt::backward: no forward() to differentiate");
  if (params.size() != layout_.size() || grads.size() != layout_.size())
    throw std::invalid_argument("Gpt::backward: params/grads have the wrong size");
  have_forward_ = false;  // logits now become dlogits
  const S* p = params.data();
  S* g = grads.data();
  std::fill(grads.begin(), grads.end(), S(0));
  const int B = B_, T = T_, C = cfg_.n_embd, NH = cfg_.n_head, V = cfg_.vocab;
  const int L = cfg_.n_layer;
  const int N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;

  // loss = mean CE: dlogits = (probs - onehot) / N
  nn::crossentropy_softmax_backward(a_.logits, targets_.data(), N, V, S(1) / S(N));
  // tied head: dlnf = dlogits · wte ; dwte += dlogitsᵀ · lnf
  nn::matmul_backward<S>(a_.dln, g + wte_, nullptr, a_.logits, a_.lnf, p + wte_, N, C, V);
  std::fill(a_.dres, a_.dres + NC, S(0));
  layernorm_backward(a_.dres, g + lnfw_, g + lnfb_, a_.dln, a_.res3 + (L - 1) * NC, p + lnfw_,
                     a_.lnf_mean, a_.lnf_rstd, N, C);

  for (int l = L - 1; l >= 0; --l) {
    const LayerOffsets& o = lo_[l];
    const S* res_in = l == 0 ? a_.encoded : a_.res3 + (l - 1) * NC;
    const S* ln1 = a_.ln1 + l * NC;
    const S* qkv = a_.qkv + l * 3 * NC;
    const S* att = a_.att + static_cast<std::size_t>(l) * B * NH * T * T;
    const S* atty = a_.atty + l * NC;
    const S* res2 = a_.res2 + l * NC;
    const S* ln2 = a_.ln2 + l * NC;
    const S* fch = a_.fch + l * 4 * NC;
    const S* fch_gelu = a_.fch_gelu + l * 4 * NC;

    // res3 = res2 + proj(gelu(fc(ln2(res2)))): dres carries d res3 and becomes d res2
    nn::matmul_backward(a_.dfch, g + o.fcprojw, g + o.fcprojb, a_.dres, fch_gelu, p + o.fcprojw,
                        N, 4 * C, C);
    gelu_backward(a_.dfch, fch, a_.dfch, 4 * NC);  // fch holds GELU' (run_forward)
    nn::matmul_backward(a_.dln, g + o.fcw, g + o.fcb, a_.dfch, ln2, p + o.fcw, N, C, 4 * C);
    layernorm_backward(a_.dres, g + o.ln2w, g + o.ln2b, a_.dln, res2, p + o.ln2w,
                       a_.ln2_mean + l * N, a_.ln2_rstd + l * N, N, C);
    // res2 = res_in + proj(attn(qkv(ln1(res_in)))): dres becomes d res_in
    nn::matmul_backward(a_.datty, g + o.projw, g + o.projb, a_.dres, atty, p + o.projw, N, C, C);
    attention_backward(a_.dqkv, a_.dpreatt, a_.datty, qkv, att, B, T, C, NH);
    nn::matmul_backward(a_.dln, g + o.qkvw, g + o.qkvb, a_.dqkv, ln1, p + o.qkvw, N, C, 3 * C);
    layernorm_backward(a_.dres, g + o.ln1w, g + o.ln1b, a_.dln, res_in, p + o.ln1w,
                       a_.ln1_mean + l * N, a_.ln1_rstd + l * N, N, C);
  }
  encoder_backward(g + wte_, g + wpe_, a_.dres, inputs_.data(), B, T, C);
}

template <class S>
S Gpt<S>::loss_and_grad(std::span<const S> params, const Batch& batch, std::span<S> grads) {
  const S l = forward(params, batch);
  backward(params, grads);
  return l;
}

template <class S>
S Gpt<S>::loss(std::span<const S> params, const Batch& batch) {
  if (params.size() != layout_.size())
    throw std::invalid_argument("Gpt::loss: params has the wrong size");
  prepare(batch);
  have_forward_ = false;
  return run_forward(params.data(), false);
}

template <class S>
double Gpt<S>::flops_per_token(int T) const {
  const double C = cfg_.n_embd, L = cfg_.n_layer, V = cfg_.vocab;
  return 6.0 * (12.0 * L * C * C) + 6.0 * C * V + 6.0 * L * C * (T + 1.0);
}

template class Gpt<float>;
template class Gpt<double>;

}  // namespace diloco
