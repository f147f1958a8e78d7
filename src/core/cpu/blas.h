/* blas.h - single-precision GEMM for the cpu kernels: row-major cblas_sgemm
 * semantics, split over the backend's thread pool, each part one
 * single-threaded OpenBLAS call.
 *
 * OpenBLAS's own threads are switched off for the process (cpu_blas_init,
 * called by backend_cpu_create): its workers spin in sched_yield for a long
 * while after every threaded call, competing with our pool on small
 * machines, and its thread count is one global setting that backends of
 * different sizes (e.g. concurrent voice-preparation lanes) would fight
 * over. A pool of n threads thus runs at most n threads of BLAS work. */
#ifndef CBX_CPU_BLAS_H
#define CBX_CPU_BLAS_H

#include <cblas.h>

#include "../threadpool.h"

void cpu_blas_init(void);

/* C[M,N] = alpha op(A)[M,K] op(B)[K,N] + beta C, row-major, like
 * cblas_sgemm(CblasRowMajor, ...). Split over rows of C (columns when N is
 * the larger); parts are disjoint, so the result equals one call's up to
 * OpenBLAS's blocking of each part. */
void cpu_sgemm(struct threadpool *tp, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K,
               float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C,
               int ldc);

#endif
