/* gemm_avx512.c - the AVX-512 parts of the cpu GEMM (gemm.c,
 * gemm_kernels.h): the 8 x 32 register tile (gemm_ukr.inc) and the
 * transposing packer. Functions carry their own target attribute; the
 * file is compiled for the baseline ISA (and to nothing off x86). */
#include "gemm_kernels.h"

#ifdef GEMM_X86
#include <immintrin.h>

#include "avx512_tr16.h"

#define UKR_NAME gemm_ukr_avx512
#define UKR_ATTR __attribute__((target("avx512f,fma")))
#define MR GEMM_MR_AVX512
#define VL 16
#define VF __m512
#define VZERO _mm512_setzero_ps()
#define VSET(f) _mm512_set1_ps(f)
#define VLOAD(p) _mm512_loadu_ps(p)
#define VSTORE(p, v) _mm512_storeu_ps(p, v)
#define VMUL(a, b) _mm512_mul_ps(a, b)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#include "gemm_ukr.inc"

/* p lanes (8, 16, 24 or 32; lane l's depth contiguous at X + l * ld) in
 * groups of 16 lanes: 16 depths of each loaded, transposed (missing lanes
 * zero), stored as 16 slices of the group's lanes */
__attribute__((target("avx512f"))) void gemm_pack_tr_avx512(float *d, const float *X, int64_t ld, int64_t kc, int p)
{
    int64_t k = 0;
    for (; k + 16 <= kc; k += 16)
        for (int g = 0; g < p; g += 16) {
            const int nl = p - g < 16 ? p - g : 16;
            __m512i r[16];
            for (int i = 0; i < 16; i++)
                r[i] = i < nl ? _mm512_castps_si512(_mm512_loadu_ps(X + (g + i) * ld + k)) : _mm512_setzero_si512();
            avx512_tr16(r);
            for (int c = 0; c < 16; c++) {
                const __m512 v = _mm512_castsi512_ps(r[c]);
                if (nl == 16) _mm512_storeu_ps(d + (k + c) * p + g, v);
                else _mm256_storeu_ps(d + (k + c) * p + g, _mm512_castps512_ps256(v));
            }
        }
    for (; k < kc; k++)
        for (int l = 0; l < p; l++) d[k * p + l] = X[l * ld + k];
}
#endif
