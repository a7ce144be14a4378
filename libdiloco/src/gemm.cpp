// The built-in models' matrix products: OpenBLAS (Debian's libopenblas-dev), one BLAS thread.
// On a 2-core AMD EPYC (AVX2) OpenBLAS's single-thread SGEMM ran 1.4-1.5x Eigen's at the GPT's
// shapes (benchmarks/README.md, step_throughput), so every product of the models runs here (the
// per-head attention's too); Eigen keeps the element-wise passes.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 false positives, Eigen AVX-512
#endif
#include "gemm.hpp"

#include <cblas.h>

#include <Eigen/Core>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace diloco::nn {
namespace {

std::atomic<bool> pinned{false};

bool use_eigen() {
  static const bool eigen = [] {
    const char* v = std::getenv("DILOCO_GEMM");
    return v != nullptr && std::strcmp(v, "eigen") == 0;
  }();
  return eigen || pinned.load(std::memory_order_relaxed);
}

/// Chips are the parallelism: every product runs on the calling thread. OpenBLAS's thread count
/// is process-wide, so it is set once, before the first product of any model in the process.
void one_blas_thread() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

template <class S>
void eigen_gemm(bool ta, bool tb, int M, int N, int K, S alpha, const S* A, int lda, const S* B,
                int ldb, S beta, S* C, int ldc) {
  using RowMat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Stride = Eigen::OuterStride<>;
  Eigen::Map<const RowMat, 0, Stride> a(A, ta ? K : M, ta ? M : K, Stride(lda));
  Eigen::Map<const RowMat, 0, Stride> b(B, tb ? N : K, tb ? K : N, Stride(ldb));
  Eigen::Map<RowMat, 0, Stride> c(C, M, N, Stride(ldc));
  if (beta == S(0)) c.setZero();
  else if (beta != S(1)) c *= beta;
  if (!ta && !tb) c.noalias() += alpha * a * b;
  else if (!ta && tb) c.noalias() += alpha * a * b.transpose();
  else if (ta && !tb) c.noalias() += alpha * a.transpose() * b;
  else c.noalias() += alpha * a.transpose() * b.transpose();
}

CBLAS_TRANSPOSE op(bool t) { return t ? CblasTrans : CblasNoTrans; }

}  // namespace

void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  if (use_eigen()) return eigen_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  one_blas_thread();
  cblas_sgemm(CblasRowMajor, op(ta), op(tb), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda,
          const double* B, int ldb, double beta, double* C, int ldc) {
  if (use_eigen()) return eigen_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  one_blas_thread();
  cblas_dgemm(CblasRowMajor, op(ta), op(tb), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void pin_eigen_gemm() {
  // Any fixed sizes do: they decide how Eigen splits a product into blocks, and with it the order
  // of the sums. These are a common x86-64 core's (L1 32 KiB, L2 512 KiB, L3 4 MiB).
  Eigen::setCpuCacheSizes(std::ptrdiff_t{32} << 10, std::ptrdiff_t{512} << 10, std::ptrdiff_t{4} << 20);
  pinned.store(true, std::memory_order_relaxed);
}

const char* gemm_backend() { return use_eigen() ? "eigen" : "openblas"; }

}  // namespace diloco::nn
