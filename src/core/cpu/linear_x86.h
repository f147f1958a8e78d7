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

#endif
