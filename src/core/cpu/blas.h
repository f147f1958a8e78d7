/* blas.h - single-precision GEMM for the cpu kernels: row-major cblas_sgemm
 * semantics, split over the backend's thread pool, each part one
 * single-threaded call of our own kernels (gemm.c, at AVX2 and AVX-512)
 * or of OpenBLAS (below AVX2, or when chosen: cpu_sgemm_set_impl).
 *
 * OpenBLAS's own threads are switched off for the process (cpu_blas_init,
 * called by backend_cpu_create): its workers spin in sched_yield for a long
 * while after every threaded call, competing with our pool on small
 * machines, and its thread count is one global setting that backends of
 * different sizes (e.g. concurrent voice-preparation lanes) would fight
 * over. A pool of n threads thus runs at most n threads of BLAS work.
 * Thread safety: any thread; cpu_sgemm_set_impl is for tests and
 * benchmarks and races only with products already running. */
#ifndef CBX_CPU_BLAS_H
#define CBX_CPU_BLAS_H

#include <cblas.h>
#include <stdbool.h>
#include <stdint.h>

#include "../threadpool.h"

void cpu_blas_init(void);

/* C[M,N] = alpha op(A)[M,K] op(B)[K,N] + beta C, row-major, like
 * cblas_sgemm(CblasRowMajor, ...). Split over rows of C (columns when N is
 * the larger); parts are disjoint, and our kernels sum each element the
 * same way whatever the split (gemm.c), OpenBLAS up to its blocking of
 * each part. */
void cpu_sgemm(struct threadpool *tp, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K,
               float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C,
               int ldc);

/* Which implementation cpu_sgemm runs. AUTO (default; CBX_SGEMM=own|blas
 * in the environment, read once, picks one): our kernels where the CPU
 * level (cpu_features.h) has them and OpenBLAS's core (its DYNAMIC_ARCH
 * choice) has no kernels of that level, else OpenBLAS. OWN: ours where
 * the level has them. */
enum cpu_sgemm_impl { SGEMM_AUTO, SGEMM_OWN, SGEMM_BLAS };
/* Sets the choice for the process; returns the previous one. */
enum cpu_sgemm_impl cpu_sgemm_set_impl(enum cpu_sgemm_impl impl);
/* What cpu_sgemm runs now, e.g. "own avx512" or "openblas Prescott"
 * (static string). */
const char *cpu_sgemm_name(void);

/* gemm.c: one single-threaded product with our kernels at the current
 * CPU level; false (nothing written) when there is none for the level,
 * a dimension is not positive, or its packing buffer cannot be had. ta,
 * tb: A, B transposed (cblas's Trans). */
bool cpu_gemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

#endif
