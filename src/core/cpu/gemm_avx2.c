/* gemm_avx2.c - the AVX2 + FMA register tile of the cpu GEMM (gemm.c,
 * gemm_kernels.h): 6 rows x 16 columns (gemm_ukr.inc). The function
 * carries its own target attribute; the file is compiled for the baseline
 * ISA (and to nothing off x86). */
#include "gemm_kernels.h"

#ifdef GEMM_X86
#include <immintrin.h>

#define UKR_NAME gemm_ukr_avx2
#define UKR_ATTR __attribute__((target("avx2,fma")))
#define MR GEMM_MR_AVX2
#define VL 8
#define VF __m256
#define VZERO _mm256_setzero_ps()
#define VSET(f) _mm256_set1_ps(f)
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, v) _mm256_storeu_ps(p, v)
#define VMUL(a, b) _mm256_mul_ps(a, b)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#include "gemm_ukr.inc"

/* r[i] float c -> r[c] float i: an in-register transpose of 8 x 8 */
__attribute__((target("avx2"))) static inline void tr8(__m256 r[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 2; g++) {
        const __m256 *s = t + 4 * g;
        u[4 * g] = _mm256_shuffle_ps(s[0], s[2], 0x44);
        u[4 * g + 1] = _mm256_shuffle_ps(s[0], s[2], 0xee);
        u[4 * g + 2] = _mm256_shuffle_ps(s[1], s[3], 0x44);
        u[4 * g + 3] = _mm256_shuffle_ps(s[1], s[3], 0xee);
    }
    for (int q = 0; q < 4; q++) {
        r[q] = _mm256_permute2f128_ps(u[q], u[4 + q], 0x20);
        r[4 + q] = _mm256_permute2f128_ps(u[q], u[4 + q], 0x31);
    }
}

/* as gemm_pack_tr_avx512 (gemm_kernels.h) in groups of 8 lanes, p any
 * count; a group's missing lanes are neither read nor stored */
__attribute__((target("avx2"))) void gemm_pack_tr_avx2(float *d, const float *X, int64_t ld, int64_t kc, int p)
{
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8)
        for (int g = 0; g < p; g += 8) {
            const int nl = p - g < 8 ? p - g : 8;
            const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(nl), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            __m256 r[8];
            for (int i = 0; i < 8; i++) r[i] = i < nl ? _mm256_loadu_ps(X + (g + i) * ld + k) : _mm256_setzero_ps();
            tr8(r);
            for (int c = 0; c < 8; c++) _mm256_maskstore_ps(d + (k + c) * p + g, keep, r[c]);
        }
    for (; k < kc; k++)
        for (int l = 0; l < p; l++) d[k * p + l] = X[l * ld + k];
}
#endif
