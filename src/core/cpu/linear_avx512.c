/* linear_avx512.c - AVX-512 (F/BW/VL) + VNNI row dot products (see
 * linear_kernels.h).
 *
 * Quantised blocks use vpdpbusd on 256-bit registers: one instruction
 * does the u8 x i8 products and the 4-way i32 sums that take maddubs +
 * madd on AVX2 (signed weights: |w| . sign(x, w), as there). A block is 32
 * quants, so 256 bits is its natural width; two blocks per 512-bit
 * register would need a per-half scale vector that costs what it saves.
 * Float rows (F32/F16/BF16) use 512-bit registers, 64 elements a step. */
#include "linear_x86.h"

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

TGT static inline __m256 vdot_ss(__m256i w, __m256i x)
{
    __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(w, w),
                                    _mm256_sign_epi8(x, w));
    return _mm256_cvtepi32_ps(p);
}

TGT static inline __m256 vdot_us(__m256i w, __m256i x)
{
    return _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x));
}

TGT static float dot_q4_0(const void *vw, const void *vx, int64_t n)
{
    const struct block_q4_0 *w = vw;
    const struct block_q8_0 *x = vx;
    const int64_t nb = n / QK;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    const __m256i eight = _mm256_set1_epi8(8);
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m256i w0 = _mm256_sub_epi8(nibbles(w[i].qs), eight);
        __m256i w1 = _mm256_sub_epi8(nibbles(w[i + 1].qs), eight);
        __m256i x0 = _mm256_loadu_si256((const __m256i *)x[i].qs);
        __m256i x1 = _mm256_loadu_si256((const __m256i *)x[i + 1].qs);
        acc0 = _mm256_fmadd_ps(vdot_ss(w0, x0), _mm256_set1_ps(h2f(w[i].d) * h2f(x[i].d)), acc0);
        acc1 = _mm256_fmadd_ps(vdot_ss(w1, x1),
                               _mm256_set1_ps(h2f(w[i + 1].d) * h2f(x[i + 1].d)), acc1);
    }
    for (; i < nb; i++) {
        __m256i w0 = _mm256_sub_epi8(nibbles(w[i].qs), eight);
        __m256i x0 = _mm256_loadu_si256((const __m256i *)x[i].qs);
        acc0 = _mm256_fmadd_ps(vdot_ss(w0, x0), _mm256_set1_ps(h2f(w[i].d) * h2f(x[i].d)), acc0);
    }
    return hsum8(_mm256_add_ps(acc0, acc1));
}

TGT static float dot_q4_1(const void *vw, const void *vx, int64_t n)
{
    const struct block_q4_1 *w = vw;
    const struct block_q8_1 *x = vx;
    const int64_t nb = n / QK;
    __m256 acc = _mm256_setzero_ps();
    float summs = 0;
    for (int64_t i = 0; i < nb; i++) {
        __m256i x0 = _mm256_loadu_si256((const __m256i *)x[i].qs);
        acc = _mm256_fmadd_ps(vdot_us(nibbles(w[i].qs), x0),
                              _mm256_set1_ps(h2f(w[i].d) * h2f(x[i].d)), acc);
        summs += h2f(w[i].m) * h2f(x[i].s);
    }
    return hsum8(acc) + summs;
}

TGT static float dot_q5_0(const void *vw, const void *vx, int64_t n)
{
    const struct block_q5_0 *w = vw;
    const struct block_q8_0 *x = vx;
    const int64_t nb = n / QK;
    __m256 acc = _mm256_setzero_ps();
    const __m256i f0 = _mm256_set1_epi8((char)0xf0);
    for (int64_t i = 0; i < nb; i++) {
        __m256i hi = _mm256_andnot_si256(bits_to_bytes(w[i].qh), f0); /* see linear_avx2.c */
        __m256i w0 = _mm256_or_si256(nibbles(w[i].qs), hi);
        __m256i x0 = _mm256_loadu_si256((const __m256i *)x[i].qs);
        acc = _mm256_fmadd_ps(vdot_ss(w0, x0), _mm256_set1_ps(h2f(w[i].d) * h2f(x[i].d)), acc);
    }
    return hsum8(acc);
}

TGT static float dot_q5_1(const void *vw, const void *vx, int64_t n)
{
    const struct block_q5_1 *w = vw;
    const struct block_q8_1 *x = vx;
    const int64_t nb = n / QK;
    __m256 acc = _mm256_setzero_ps();
    float summs = 0;
    const __m256i b4 = _mm256_set1_epi8(0x10);
    for (int64_t i = 0; i < nb; i++) {
        __m256i hi = _mm256_and_si256(bits_to_bytes(w[i].qh), b4);
        __m256i w0 = _mm256_or_si256(nibbles(w[i].qs), hi);
        __m256i x0 = _mm256_loadu_si256((const __m256i *)x[i].qs);
        acc = _mm256_fmadd_ps(vdot_us(w0, x0), _mm256_set1_ps(h2f(w[i].d) * h2f(x[i].d)), acc);
        summs += h2f(w[i].m) * h2f(x[i].s);
    }
    return hsum8(acc) + summs;
}

TGT static float dot_q8_0(const void *vw, const void *vx, int64_t n)
{
    const struct block_q8_0 *w = vw;
    const struct block_q8_0 *x = vx;
    const int64_t nb = n / QK;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m256i w0 = _mm256_loadu_si256((const __m256i *)w[i].qs);
        __m256i w1 = _mm256_loadu_si256((const __m256i *)w[i + 1].qs);
        __m256i x0 = _mm256_loadu_si256((const __m256i *)x[i].qs);
        __m256i x1 = _mm256_loadu_si256((const __m256i *)x[i + 1].qs);
        acc0 = _mm256_fmadd_ps(vdot_ss(w0, x0), _mm256_set1_ps(h2f(w[i].d) * h2f(x[i].d)), acc0);
        acc1 = _mm256_fmadd_ps(vdot_ss(w1, x1),
                               _mm256_set1_ps(h2f(w[i + 1].d) * h2f(x[i + 1].d)), acc1);
    }
    for (; i < nb; i++) {
        __m256i w0 = _mm256_loadu_si256((const __m256i *)w[i].qs);
        __m256i x0 = _mm256_loadu_si256((const __m256i *)x[i].qs);
        acc0 = _mm256_fmadd_ps(vdot_ss(w0, x0), _mm256_set1_ps(h2f(w[i].d) * h2f(x[i].d)), acc0);
    }
    return hsum8(_mm256_add_ps(acc0, acc1));
}

/* Float rows: 64 elements per step in four 16-lane accumulators, then a
 * masked load for the last partial vector (no scalar tail). */
#define FLOAT_DOT(name, LOAD16, MLOAD16)                                        \
    TGT static float name(const void *vw, const void *vx, int64_t n)           \
    {                                                                          \
        const uint8_t *wb = vw;                                                \
        const float *x = vx;                                                   \
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;            \
        int64_t i = 0;                                                         \
        for (; i + 64 <= n; i += 64) {                                         \
            a0 = _mm512_fmadd_ps(LOAD16(i), _mm512_loadu_ps(x + i), a0);       \
            a1 = _mm512_fmadd_ps(LOAD16(i + 16), _mm512_loadu_ps(x + i + 16), a1); \
            a2 = _mm512_fmadd_ps(LOAD16(i + 32), _mm512_loadu_ps(x + i + 32), a2); \
            a3 = _mm512_fmadd_ps(LOAD16(i + 48), _mm512_loadu_ps(x + i + 48), a3); \
        }                                                                      \
        for (; i + 16 <= n; i += 16)                                           \
            a0 = _mm512_fmadd_ps(LOAD16(i), _mm512_loadu_ps(x + i), a0);       \
        if (i < n) {                                                           \
            __mmask16 m = (__mmask16)((1u << (n - i)) - 1);                    \
            a1 = _mm512_fmadd_ps(MLOAD16(m, i), _mm512_maskz_loadu_ps(m, x + i), a1); \
        }                                                                      \
        return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))); \
    }

#define LOAD_F32(i) _mm512_loadu_ps((const float *)wb + (i))
#define MLOAD_F32(m, i) _mm512_maskz_loadu_ps(m, (const float *)wb + (i))
#define LOAD_F16(i) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wb + 2 * (i))))
#define MLOAD_F16(m, i) _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, wb + 2 * (i)))
#define BF16_WIDEN(v) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16))
#define LOAD_BF16(i) BF16_WIDEN(_mm256_loadu_si256((const __m256i *)(wb + 2 * (i))))
#define MLOAD_BF16(m, i) BF16_WIDEN(_mm256_maskz_loadu_epi16(m, wb + 2 * (i)))

FLOAT_DOT(dot_f32, LOAD_F32, MLOAD_F32)
FLOAT_DOT(dot_f16, LOAD_F16, MLOAD_F16)
FLOAT_DOT(dot_bf16, LOAD_BF16, MLOAD_BF16)

vec_dot_fn linear_dot_avx512(enum dtype t)
{
    switch (t) {
    case TYPE_F32: return dot_f32;
    case TYPE_F16: return dot_f16;
    case TYPE_BF16: return dot_bf16;
    case TYPE_Q4_0: return dot_q4_0;
    case TYPE_Q4_1: return dot_q4_1;
    case TYPE_Q5_0: return dot_q5_0;
    case TYPE_Q5_1: return dot_q5_1;
    case TYPE_Q8_0: return dot_q8_0;
    default: return NULL;
    }
}
