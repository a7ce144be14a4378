// Private (not installed) forward/backward kernels shared by the GPT and the MLP, on raw row-major
// buffers through Eigen Maps; llm.c's X_forward / X_backward pairs. Eigen stays inside src/.
#pragma once

// GCC 12 reports false -Wmaybe-uninitialized positives inside Eigen's AVX-512 packet code
// (avx512fintrin.h '__Y'); they are raised at instantiation time, so the pragma covers the TU.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>

#include "diloco/rng.hpp"
#include "gemm.hpp"

namespace diloco::nn {

template <class S>
using RowMat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class S>
using Mat = Eigen::Map<RowMat<S>>;
template <class S>
using CMat = Eigen::Map<const RowMat<S>>;
template <class S>
using Vec = Eigen::Map<Eigen::Array<S, Eigen::Dynamic, 1>>;
template <class S>
using CVec = Eigen::Map<const Eigen::Array<S, Eigen::Dynamic, 1>>;

/// Fills `out` with normal(0, std) draws from a stream derived from (seed, stream).
template <class S>
void fill_normal(std::span<S> out, double std, std::uint64_t seed, std::uint64_t stream) {
  Rng rng(derive_seed(seed, stream));
  for (auto& x : out) x = static_cast<S>(std * rng.normal());
}

/// out (N,OC) = inp (N,C) · wᵀ (C,OC) + bias (OC) [+ residual (N,OC) when given].
template <class S>
void matmul_forward(S* out, const S* inp, const S* w, const S* bias, int N, int C, int OC,
                    const S* residual = nullptr) {
  for (int n = 0; n < N; ++n) {
    S* row = out + static_cast<std::size_t>(n) * OC;
    const S* res = residual ? residual + static_cast<std::size_t>(n) * OC : nullptr;
    if (bias && res)
      for (int j = 0; j < OC; ++j) row[j] = res[j] + bias[j];
    else if (bias)
      std::memcpy(row, bias, sizeof(S) * OC);
    else if (res)
      std::memcpy(row, res, sizeof(S) * OC);
    else
      std::memset(row, 0, sizeof(S) * OC);
  }
  gemm(false, true, N, OC, C, S(1), inp, C, w, C, S(1), out, OC);
}

/// Backward of matmul_forward: dinp (N,C) = dout · w (overwritten; skipped when null),
/// dw (OC,C) += doutᵀ · inp, dbias (OC) += column sums of dout.
template <class S>
void matmul_backward(S* dinp, S* dw, S* dbias, const S* dout, const S* inp, const S* w, int N,
                     int C, int OC) {
  if (dinp) gemm(false, false, N, C, OC, S(1), dout, OC, w, C, S(0), dinp, C);
  gemm(true, false, OC, C, N, S(1), dout, OC, inp, C, S(1), dw, C);
  if (dbias) {
    for (int n = 0; n < N; ++n) {
      const S* row = dout + static_cast<std::size_t>(n) * OC;
      for (int j = 0; j < OC; ++j) dbias[j] += row[j];
    }
  }
}

/// Softmax cross-entropy over rows of logits (N,V) against targets (N). Returns the SUM of the
/// N losses; when `keep_probs`, logits are overwritten by the softmax probabilities.
template <class S>
double crossentropy_forward(S* logits, const int* targets, int N, int V, bool keep_probs) {
  double total = 0.0;
  for (int n = 0; n < N; ++n) {
    Vec<S> l(logits + static_cast<std::size_t>(n) * V, V);
    const S m = l.maxCoeff();
    const S target_logit = l[targets[n]];
    S sum;
    if (keep_probs) {
      l = (l - m).exp();
      sum = l.sum();
      l *= S(1) / sum;
    } else {
      sum = (l - m).exp().sum();
    }
    total += static_cast<double>(m) + std::log(static_cast<double>(sum)) -
             static_cast<double>(target_logit);
  }
  return total;
}

/// In place: probs (N,V) -> dlogits = (probs - onehot(target)) * scale, scale = 1/(#targets).
template <class S>
void crossentropy_softmax_backward(S* probs, const int* targets, int N, int V, S scale) {
  for (int n = 0; n < N; ++n) {
    S* row = probs + static_cast<std::size_t>(n) * V;
    row[targets[n]] -= S(1);
    for (int j = 0; j < V; ++j) row[j] *= scale;
  }
}

}  // namespace diloco::nn
