/* gemm_avx2.c - the AVX2 + FMA register tile of the cpu GEMM (gemm.c,
 * gemm_kernels.h): 6 rows x 16 columns, 12 ymm accumulators; per k two
 * loads of B and six broadcasts of A feed 12 FMAs. The function carries
 * its own target attribute; the file is compiled for the baseline ISA
 * (and to nothing off x86). */
#include "gemm_kernels.h"

#ifdef GEMM_X86
#include <immintrin.h>

#define MR GEMM_MR_AVX2
#define NR GEMM_NR_AVX2

__attribute__((target("avx2,fma"))) void gemm_ukr_avx2(int64_t kc, const float *ap, const float *bp, float *c,
                                                     int64_t ldc, float alpha, float beta, bool beta_zero)
{
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps(),
           c11 = _mm256_setzero_ps(), c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps(),
           c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(), c40 = _mm256_setzero_ps(),
           c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; k++, ap += MR, bp += NR) {
        const __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
        __m256 a = _mm256_broadcast_ss(ap);
        c00 = _mm256_fmadd_ps(a, b0, c00);
        c01 = _mm256_fmadd_ps(a, b1, c01);
        a = _mm256_broadcast_ss(ap + 1);
        c10 = _mm256_fmadd_ps(a, b0, c10);
        c11 = _mm256_fmadd_ps(a, b1, c11);
        a = _mm256_broadcast_ss(ap + 2);
        c20 = _mm256_fmadd_ps(a, b0, c20);
        c21 = _mm256_fmadd_ps(a, b1, c21);
        a = _mm256_broadcast_ss(ap + 3);
        c30 = _mm256_fmadd_ps(a, b0, c30);
        c31 = _mm256_fmadd_ps(a, b1, c31);
        a = _mm256_broadcast_ss(ap + 4);
        c40 = _mm256_fmadd_ps(a, b0, c40);
        c41 = _mm256_fmadd_ps(a, b1, c41);
        a = _mm256_broadcast_ss(ap + 5);
        c50 = _mm256_fmadd_ps(a, b0, c50);
        c51 = _mm256_fmadd_ps(a, b1, c51);
    }
    const __m256 acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    for (int i = 0; i < MR; i++, c += ldc)
        for (int h = 0; h < 2; h++) {
            __m256 v = _mm256_mul_ps(va, acc[i][h]);
            if (!beta_zero) v = _mm256_fmadd_ps(vb, _mm256_loadu_ps(c + 8 * h), v);
            _mm256_storeu_ps(c + 8 * h, v);
        }
}
#endif
