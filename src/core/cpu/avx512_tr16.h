/* avx512_tr16.h - one AVX-512 helper shared by the AMX kernels (conv.c,
 * linear_bf16.c). Include only where <immintrin.h> is available (x86-64
 * with GCC or clang); callers are compiled for AVX-512F or more. */
#ifndef CBX_CPU_AVX512_TR16_H
#define CBX_CPU_AVX512_TR16_H

#include <immintrin.h>

/* r[i] dword c -> r[c] dword i: an in-register transpose of 16 x 16
 * 32-bit elements (used by the AMX paths to turn C tiles and weight rows). */
static inline __attribute__((always_inline, target("avx512f"))) void avx512_tr16(__m512i r[16])
{
    __m512i t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 4; g++) {
        __m512i *u = r + 4 * g, *s = t + 4 * g;
        u[0] = _mm512_unpacklo_epi64(s[0], s[2]);
        u[1] = _mm512_unpackhi_epi64(s[0], s[2]);
        u[2] = _mm512_unpacklo_epi64(s[1], s[3]);
        u[3] = _mm512_unpackhi_epi64(s[1], s[3]);
    }
    /* r[4g + q] lane L now holds column 4L + q of rows 4g .. 4g+3 */
    for (int q = 0; q < 4; q++) {
        __m512i x0 = _mm512_shuffle_i32x4(r[q], r[4 + q], 0x44);
        __m512i x1 = _mm512_shuffle_i32x4(r[8 + q], r[12 + q], 0x44);
        __m512i x2 = _mm512_shuffle_i32x4(r[q], r[4 + q], 0xee);
        __m512i x3 = _mm512_shuffle_i32x4(r[8 + q], r[12 + q], 0xee);
        t[q] = _mm512_shuffle_i32x4(x0, x1, 0x88);
        t[4 + q] = _mm512_shuffle_i32x4(x0, x1, 0xdd);
        t[8 + q] = _mm512_shuffle_i32x4(x2, x3, 0x88);
        t[12 + q] = _mm512_shuffle_i32x4(x2, x3, 0xdd);
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

#endif
