/* bf16_dp_avx512.h - the block product of the BF16 kernels (linear_bf16.c,
 * attn_bf16.c) on AVX512-BF16 without AMX (AMD Zen 4 and later, Intel
 * Cooper Lake): the sums an AMX tile product makes, over the same operand
 * layouts, with VDPBF16PS (16 F32 lanes, each += the two products of a
 * BF16 pair; twice the multiply-adds of an F32 FMA per instruction).
 *
 * bf16dp_8x32 computes, for rows r < 8 and columns n < 16 nc (nc 1 or 2):
 *    c[r][n] = (acc ? c[r][n] : 0) + sum over pairs i of A(r, i) . B(i)[n]
 * over the pairs i = 16 (n0 g1 + g0) + p, g1 < n1, g0 < n0, p < 16 (16
 * pairs = 32 K values a group), with A(r, i) the BF16 pair (two
 * consecutive K as one dword) at
 *    a + r lda + g1 as1 + g0 as0 + 2 p                 (uint16_t units)
 * and B(i) the 16 pairs (64 bytes, column n's pair in dword n) at
 *    b + (n0 g1 + g0) bo + 32 p + (n / 16) bd,
 * that is an AMX B tile of 16 pair rows every bo, its second 16 columns bd
 * further. A row of K contiguous is as0 = 32, n1 = 1; a convolution's taps
 * and input-channel blocks are the two levels. Each pair's A dword is
 * broadcast from memory once for both column blocks; the 8 x 2 sums stay
 * in registers over all pairs. Rounding as AMX-BF16: each product of two
 * BF16 values is exact in F32, the sums F32 (round to nearest even), BF16
 * denormal inputs read as zero.
 * Needs the caller's target to include BF16DP_TGT's features. */
#ifndef CBX_CPU_BF16_DP_AVX512_H
#define CBX_CPU_BF16_DP_AVX512_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define BF16DP_TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))

BF16DP_TGT static inline __m512bh bf16dp_bcast(const uint16_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return (__m512bh)_mm512_set1_epi32(v);
}

BF16DP_TGT static inline __m512bh bf16dp_load(const uint16_t *p)
{
    return (__m512bh)_mm512_loadu_si512(p);
}

BF16DP_TGT static inline void bf16dp_8x32(float *c, int64_t ldc, bool acc, const uint16_t *a,
                                          int64_t lda, int64_t as0, int64_t as1, int64_t n0,
                                          int64_t n1, const uint16_t *b, int64_t bo, int64_t bd,
                                          int nc)
{
    __m512 s0[8], s1[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        s0[r] = acc ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
        s1[r] = acc && nc > 1 ? _mm512_loadu_ps(c + r * ldc + 16) : _mm512_setzero_ps();
    }
    for (int64_t g1 = 0; g1 < n1; g1++)
        for (int64_t g0 = 0; g0 < n0; g0++) {
            const uint16_t *bg = b + (g1 * n0 + g0) * bo, *ag = a + g1 * as1 + g0 * as0;
            if (nc > 1) {
                for (int p = 0; p < 16; p++) {
                    __m512bh b0 = bf16dp_load(bg + p * 32), b1 = bf16dp_load(bg + p * 32 + bd);
#pragma GCC unroll 8
                    for (int r = 0; r < 8; r++) {
                        __m512bh x = bf16dp_bcast(ag + r * lda + 2 * p);
                        s0[r] = _mm512_dpbf16_ps(s0[r], x, b0);
                        s1[r] = _mm512_dpbf16_ps(s1[r], x, b1);
                    }
                }
            } else {
                for (int p = 0; p < 16; p++) {
                    __m512bh b0 = bf16dp_load(bg + p * 32);
#pragma GCC unroll 8
                    for (int r = 0; r < 8; r++)
                        s0[r] = _mm512_dpbf16_ps(s0[r], bf16dp_bcast(ag + r * lda + 2 * p), b0);
                }
            }
        }
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        _mm512_storeu_ps(c + r * ldc, s0[r]);
        if (nc > 1) _mm512_storeu_ps(c + r * ldc + 16, s1[r]);
    }
}

#endif
#endif
