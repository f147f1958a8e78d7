/* gemm_avx512.c - the AVX-512 register tile of the cpu GEMM (gemm.c,
 * gemm_kernels.h): 8 rows x 32 columns, 16 zmm accumulators; per k two
 * loads of B and eight broadcasts of A feed 16 FMAs. The function carries
 * its own target attribute; the file is compiled for the baseline ISA
 * (and to nothing off x86). */
#include "gemm_kernels.h"

#ifdef GEMM_X86
#include <immintrin.h>

#include "avx512_tr16.h"

#define MR GEMM_MR_AVX512
#define NR GEMM_NR_AVX512

__attribute__((target("avx512f,fma"))) void gemm_ukr_avx512(int64_t kc, const float *ap, const float *bp, float *c,
                                                          int64_t ldc, float alpha, float beta, bool beta_zero)
{
    __m512 c00 = _mm512_setzero_ps(), c01 = _mm512_setzero_ps(), c10 = _mm512_setzero_ps(),
           c11 = _mm512_setzero_ps(), c20 = _mm512_setzero_ps(), c21 = _mm512_setzero_ps(),
           c30 = _mm512_setzero_ps(), c31 = _mm512_setzero_ps(), c40 = _mm512_setzero_ps(),
           c41 = _mm512_setzero_ps(), c50 = _mm512_setzero_ps(), c51 = _mm512_setzero_ps(),
           c60 = _mm512_setzero_ps(), c61 = _mm512_setzero_ps(), c70 = _mm512_setzero_ps(),
           c71 = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++, ap += MR, bp += NR) {
        const __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
        __m512 a = _mm512_set1_ps(ap[0]);
        c00 = _mm512_fmadd_ps(a, b0, c00);
        c01 = _mm512_fmadd_ps(a, b1, c01);
        a = _mm512_set1_ps(ap[1]);
        c10 = _mm512_fmadd_ps(a, b0, c10);
        c11 = _mm512_fmadd_ps(a, b1, c11);
        a = _mm512_set1_ps(ap[2]);
        c20 = _mm512_fmadd_ps(a, b0, c20);
        c21 = _mm512_fmadd_ps(a, b1, c21);
        a = _mm512_set1_ps(ap[3]);
        c30 = _mm512_fmadd_ps(a, b0, c30);
        c31 = _mm512_fmadd_ps(a, b1, c31);
        a = _mm512_set1_ps(ap[4]);
        c40 = _mm512_fmadd_ps(a, b0, c40);
        c41 = _mm512_fmadd_ps(a, b1, c41);
        a = _mm512_set1_ps(ap[5]);
        c50 = _mm512_fmadd_ps(a, b0, c50);
        c51 = _mm512_fmadd_ps(a, b1, c51);
        a = _mm512_set1_ps(ap[6]);
        c60 = _mm512_fmadd_ps(a, b0, c60);
        c61 = _mm512_fmadd_ps(a, b1, c61);
        a = _mm512_set1_ps(ap[7]);
        c70 = _mm512_fmadd_ps(a, b0, c70);
        c71 = _mm512_fmadd_ps(a, b1, c71);
    }
    const __m512 acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31},
                               {c40, c41}, {c50, c51}, {c60, c61}, {c70, c71}};
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int i = 0; i < MR; i++, c += ldc)
        for (int h = 0; h < 2; h++) {
            __m512 v = _mm512_mul_ps(va, acc[i][h]);
            if (!beta_zero) v = _mm512_fmadd_ps(vb, _mm512_loadu_ps(c + 16 * h), v);
            _mm512_storeu_ps(c + 16 * h, v);
        }
}

/* 16 rows of 16 floats (row r at src + r * ld) transposed: out[c] holds
 * element c of each row */
__attribute__((target("avx512f"))) static inline void load_tr16(__m512i r[16], const float *src, int64_t ld)
{
    for (int i = 0; i < 16; i++) r[i] = _mm512_castps_si512(_mm512_loadu_ps(src + i * ld));
    avx512_tr16(r);
}

__attribute__((target("avx512f"))) void gemm_pack_bt_avx512(float *d, const float *B, int64_t ldb, int64_t kc)
{
    int64_t k = 0;
    for (; k + 16 <= kc; k += 16)
        for (int g = 0; g < NR / 16; g++) {
            __m512i r[16];
            load_tr16(r, B + g * 16 * ldb + k, ldb);
            for (int c = 0; c < 16; c++) _mm512_storeu_ps(d + (k + c) * NR + 16 * g, _mm512_castsi512_ps(r[c]));
        }
    for (; k < kc; k++)
        for (int j = 0; j < NR; j++) d[k * NR + j] = B[j * ldb + k];
}

__attribute__((target("avx512f"))) void gemm_pack_an_avx512(float *d, const float *A, int64_t lda, int64_t kc)
{
    int64_t k = 0;
    for (; k + 16 <= kc; k += 16) {
        __m512i r[16];
        for (int i = 0; i < MR; i++) r[i] = _mm512_castps_si512(_mm512_loadu_ps(A + i * lda + k));
        for (int i = MR; i < 16; i++) r[i] = _mm512_setzero_si512();
        avx512_tr16(r);
        for (int c = 0; c < 16; c++)
            _mm256_storeu_ps(d + (k + c) * MR, _mm512_castps512_ps256(_mm512_castsi512_ps(r[c])));
    }
    for (; k < kc; k++)
        for (int i = 0; i < MR; i++) d[k * MR + i] = A[i * lda + k];
}
#endif
