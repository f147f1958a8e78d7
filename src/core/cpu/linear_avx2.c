/* linear_avx2.c - AVX2 + FMA + F16C row dot products (see linear_kernels.h).
 *
 * Quantised blocks: the 32 weight quants are widened to signed bytes, then
 * multiplied with the Q8 activation bytes by maddubs (u8 x i8 -> pairs of
 * i16) after moving the weight sign onto the activation (|w| * sign(x, w),
 * which cannot saturate: 2 * 127 * 127 < 32767), summed to 8 i32 lanes,
 * converted and scaled by d_w * d_x per block. Integer block sums are
 * exact, so results differ from the generic kernels only by float
 * reassociation. Functions carry their own target attribute; the file is
 * compiled for the baseline ISA and only called after cpu_level() says
 * AVX2 is there. */
#include "linear_x86.h"

#define TGT TGT_AVX2

/* signed w bytes . signed x bytes -> 8 float lanes (|w| <= 127) */
TGT static inline __m256 vdot_ss(__m256i w, __m256i x)
{
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

/* unsigned w bytes (< 128) . signed x bytes -> 8 float lanes */
TGT static inline __m256 vdot_us(__m256i w, __m256i x)
{
    __m256i p = _mm256_maddubs_epi16(w, x);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

#include "linear_qdot.inc"

/* Float rows: 32 elements per step in four accumulators, scalar tail. */
#define FLOAT_DOT(name, LOAD8, SCALAR)                                          \
    TGT static float name(const void *vw, const void *vx, int64_t n)           \
    {                                                                          \
        const uint8_t *wb = vw;                                                \
        const float *x = vx;                                                   \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;            \
        int64_t i = 0;                                                         \
        for (; i + 32 <= n; i += 32) {                                         \
            a0 = _mm256_fmadd_ps(LOAD8(i), _mm256_loadu_ps(x + i), a0);        \
            a1 = _mm256_fmadd_ps(LOAD8(i + 8), _mm256_loadu_ps(x + i + 8), a1); \
            a2 = _mm256_fmadd_ps(LOAD8(i + 16), _mm256_loadu_ps(x + i + 16), a2); \
            a3 = _mm256_fmadd_ps(LOAD8(i + 24), _mm256_loadu_ps(x + i + 24), a3); \
        }                                                                      \
        for (; i + 8 <= n; i += 8)                                             \
            a0 = _mm256_fmadd_ps(LOAD8(i), _mm256_loadu_ps(x + i), a0);        \
        float s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))); \
        for (; i < n; i++) s += SCALAR(i) * x[i];                              \
        return s;                                                              \
    }

#define LOAD_F32(i) _mm256_loadu_ps((const float *)wb + (i))
#define SCALAR_F32(i) ((const float *)wb)[i]
#define LOAD_F16(i) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wb + 2 * (i))))
#define SCALAR_F16(i) h2f(((const uint16_t *)wb)[i])
#define LOAD_BF16(i)                                                            \
    _mm256_castsi256_ps(_mm256_slli_epi32(                                      \
        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(wb + 2 * (i)))), 16))
#define SCALAR_BF16(i) bf16_to_f32(((const uint16_t *)wb)[i])

FLOAT_DOT(dot_f32, LOAD_F32, SCALAR_F32)
FLOAT_DOT(dot_f16, LOAD_F16, SCALAR_F16)
FLOAT_DOT(dot_bf16, LOAD_BF16, SCALAR_BF16)

vec_dot_fn linear_dot_avx2(enum dtype t)
{
    LINEAR_DOT_BY_TYPE(t)
}

/* ---- dequantisation for the sgemm tiles --------------------------------- */

TGT static void deq_f16(const void *src, float *dst, int64_t n)
{
    const uint16_t *h = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
    for (; i < n; i++) dst[i] = h2f(h[i]);
}

TGT static void deq_bf16(const void *src, float *dst, int64_t n)
{
    const uint16_t *h = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(
                                      _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(h + i))), 16)));
    for (; i < n; i++) dst[i] = bf16_to_f32(h[i]);
}

/* 32 signed bytes times d -> 32 floats (d * q exactly as the scalar code) */
TGT static inline void store_scaled(float *dst, __m256i q, float d)
{
    const __m256 vd = _mm256_set1_ps(d);
    __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    _mm256_storeu_ps(dst, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), vd));
    _mm256_storeu_ps(dst + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), vd));
    _mm256_storeu_ps(dst + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), vd));
    _mm256_storeu_ps(dst + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), vd));
}

TGT static void deq_q8_0(const void *src, float *dst, int64_t n)
{
    const struct block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK; i++)
        store_scaled(dst + i * QK, _mm256_loadu_si256((const __m256i *)b[i].qs), h2f(b[i].d));
}

TGT static void deq_q4_0(const void *src, float *dst, int64_t n)
{
    const struct block_q4_0 *b = src;
    const __m256i eight = _mm256_set1_epi8(8);
    for (int64_t i = 0; i < n / QK; i++)
        store_scaled(dst + i * QK, _mm256_sub_epi8(nibbles(b[i].qs), eight), h2f(b[i].d));
}

linear_dequant_fn linear_dequant_avx2(enum dtype t)
{
    switch (t) {
    case TYPE_F16: return deq_f16;
    case TYPE_BF16: return deq_bf16;
    case TYPE_Q8_0: return deq_q8_0;
    case TYPE_Q4_0: return deq_q4_0;
    default: return NULL;
    }
}
