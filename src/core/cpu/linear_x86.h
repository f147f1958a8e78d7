/* linear_x86.h - x86 helpers shared by linear_avx2.c and linear_avx512.c.
 * Each carries the AVX2 target; the AVX-512 functions may inline them
 * because their own target is a superset. */
#ifndef CBX_CPU_LINEAR_X86_H
#define CBX_CPU_LINEAR_X86_H

#include <immintrin.h>
#include <string.h>

#include "linear_kernels.h"

#define TGT_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TGT TGT_AVX2

static inline TGT float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline TGT float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* 16 packed nibbles -> 32 bytes 0..15: low nibbles first (elements 0..15),
 * then high nibbles (16..31), the ggml element order. */
static inline TGT __m256i nibbles(const uint8_t *qs)
{
    __m128i v = _mm_loadu_si128((const __m128i *)qs);
    __m128i m = _mm_set1_epi8(0x0f);
    __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
    return _mm256_set_m128i(hi, lo);
}

/* The 32 bits of qh -> 32 bytes, 0xff where the bit is set. */
static inline TGT __m256i bits_to_bytes(const uint8_t qh[4])
{
    uint32_t q;
    memcpy(&q, qh, 4);
    const __m256i idx = _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll,
                                          0x0101010101010101ll, 0x0000000000000000ll);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)q), idx);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

#undef TGT

/* The quantised GEMM's store (linear_avx512.c's VNNI tiles and
 * linear_amx.c's AMX epilogue; the callers' targets include this one). */
#define TGT_QG_STORE __attribute__((target("avx2,fma,f16c,avx512f,avx512vl")))

/* out rows l = 0..lanes-1 (y + l * ldy): the nw (<= 8) results of x row
 * l, i.e. lane l of in[0..nw-1], plus bias: an 8 x 16 transpose in
 * registers, then one masked 8-float store per row. */
static inline TGT_QG_STORE __attribute__((always_inline)) void
qg_store(const __m512 *in, int nw, const float *bias, float *y, int64_t ldy, int lanes)
{
    __m512 acc[8];
    for (int j = 0; j < 8; j++) acc[j] = j < nw ? in[j] : _mm512_setzero_ps();
    /* t: pairs of rows interleaved; u[r] lane q: rows 0..3 (or 4..7) of
     * element 4q + r */
    __m512 t0 = _mm512_unpacklo_ps(acc[0], acc[1]), t1 = _mm512_unpackhi_ps(acc[0], acc[1]);
    __m512 t2 = _mm512_unpacklo_ps(acc[2], acc[3]), t3 = _mm512_unpackhi_ps(acc[2], acc[3]);
    __m512 t4 = _mm512_unpacklo_ps(acc[4], acc[5]), t5 = _mm512_unpackhi_ps(acc[4], acc[5]);
    __m512 t6 = _mm512_unpacklo_ps(acc[6], acc[7]), t7 = _mm512_unpackhi_ps(acc[6], acc[7]);
    __m512 u[8] = {
        _mm512_shuffle_ps(t0, t2, 0x44), _mm512_shuffle_ps(t0, t2, 0xee),
        _mm512_shuffle_ps(t1, t3, 0x44), _mm512_shuffle_ps(t1, t3, 0xee),
        _mm512_shuffle_ps(t4, t6, 0x44), _mm512_shuffle_ps(t4, t6, 0xee),
        _mm512_shuffle_ps(t5, t7, 0x44), _mm512_shuffle_ps(t5, t7, 0xee),
    };
    const __mmask8 m = (__mmask8)((1u << nw) - 1);
    __m256 b8 = _mm256_maskz_loadu_ps(m, bias);
    __m512 b16 = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(b8)),
                                                     _mm256_castps_pd(b8), 1));
    for (int r = 0; r < 4; r++) {
        /* [lane q of u[r], lane q of u[4 + r]] = element 4q + r, q = 0..3 */
        __m512 lo = _mm512_shuffle_f32x4(u[r], u[4 + r], 0x44); /* q = 0, 1 */
        __m512 hi = _mm512_shuffle_f32x4(u[r], u[4 + r], 0xee); /* q = 2, 3 */
        lo = _mm512_add_ps(_mm512_shuffle_f32x4(lo, lo, 0xd8), b16);
        hi = _mm512_add_ps(_mm512_shuffle_f32x4(hi, hi, 0xd8), b16);
        __m256 e[4] = {_mm512_castps512_ps256(lo),
                       _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(lo), 1)),
                       _mm512_castps512_ps256(hi),
                       _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(hi), 1))};
        for (int q = 0; q < 4; q++)
            if (4 * q + r < lanes) _mm256_mask_storeu_ps(y + (4 * q + r) * ldy, m, e[q]);
    }
}

#undef TGT_QG_STORE

#endif
