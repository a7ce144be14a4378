// Private (not installed): the one general matrix product of the built-in models (GPT, MLP).
// It runs on OpenBLAS's cblas_?gemm with one BLAS thread per process, since chips are the
// parallelism; DILOCO_GEMM=eigen in the environment runs Eigen's own GEMM instead, for comparison.
#pragma once

namespace diloco::nn {

/// Row-major C (M,N) = alpha · op(A) (M,K) · op(B) (K,N) + beta · C, op = transpose when asked;
/// lda/ldb/ldc are the row strides of A, B, C as stored. beta = 0 ignores C's old contents.
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);
void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A, int lda,
          const double* B, int ldb, double beta, double* C, int ldc);

/// Which GEMM gemm() runs: "openblas", or "eigen" when DILOCO_GEMM=eigen (read once per process)
/// or after pin_eigen_gemm().
const char* gemm_backend();

/// From now on, in this process: every product on Eigen's GEMM, with Eigen's blocking computed
/// from fixed cache sizes instead of the CPU's (diloco::pin_products_for_replay, replay.hpp).
void pin_eigen_gemm();

}  // namespace diloco::nn
