/* elementwise_avx2.c - AVX2 kernels of the elementwise group (see
 * elementwise_kernels.h): float16 conversion by F16C, and vector exp,
 * expm1, tanh, erf and sin/cos for the activations that dominate the
 * vocoder (Snake's sin), the flow decoder (Mish, GELU, SiLU) and GPT-2's
 * gelu_new (tanh). Cody-Waite range reduction, then Taylor polynomials
 * taken far enough that truncation is below 0.1 ulp on the reduced
 * interval; GELU's erf piecewise, a fitted polynomial per interval looked
 * up by permute (act_simd.inc); evaluated with explicit FMA. Measured
 * against double libm in tests/core/test_elementwise.c: within 2-4 ulp.
 * Tails go through the same vector code with masked loads, so an
 * element's value never depends on where it sits in the tensor. Functions
 * carry their own target attribute; the file is compiled for the baseline
 * ISA (and to nothing off x86). */
#include "elementwise_kernels.h"

#if HAVE_X86
#include <immintrin.h>
#include <math.h>

__attribute__((target("avx,f16c"))) void elementwise_f16_to_f32_f16c(float *dst,
                                                                     const uint16_t *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = fp16_to_f32(src[i]);
}

__attribute__((target("avx,f16c"))) void elementwise_f32_to_f16_f16c(uint16_t *dst,
                                                                     const float *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = f32_to_fp16(src[i]);
}

#define AVX2_FN __attribute__((target("avx2,fma")))

AVX2_FN static inline __m256 v_set(float f) { return _mm256_set1_ps(f); }

/* 2^k for integer k in [-126, 127] (128 gives inf) */
AVX2_FN static inline __m256 v_pow2i(__m256i k)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

AVX2_FN static inline __m256 v_nan_from(__m256 y, __m256 x)
{
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* exp, erf, GELU, SiLU, sigmoid and Mish at 8 lanes (act_simd.inc) */
#define AF AVX2_FN
#define VF __m256
#define VI __m256i
#define VM __m256
#define A_(name) v_##name
#define VSET v_set
#define VZERO _mm256_setzero_ps()
#define VADD _mm256_add_ps
#define VSUB _mm256_sub_ps
#define VMUL _mm256_mul_ps
#define VDIV _mm256_div_ps
#define VMIN _mm256_min_ps
#define VMAX _mm256_max_ps
#define VFMA _mm256_fmadd_ps
#define VFNMA _mm256_fnmadd_ps
#define VRINT(x) _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VCVT _mm256_cvtps_epi32
#define VISUB _mm256_sub_epi32
#define VISRA1(a) _mm256_srai_epi32(a, 1)
#define VPOW2I v_pow2i
#define VNANFROM v_nan_from
#define VABS(x) _mm256_andnot_ps(v_set(-0.0f), x)
#define VCOPYSIGN(r, x) _mm256_or_ps(r, _mm256_and_ps(x, v_set(-0.0f)))
#define VLT(a, b) _mm256_cmp_ps(a, b, _CMP_LT_OQ)
#define VGT(a, b) _mm256_cmp_ps(a, b, _CMP_GT_OQ)
#define VSEL(m, a, b) _mm256_blendv_ps(a, b, m)
#define VTAB8(t, i) _mm256_permutevar8x32_ps(_mm256_load_ps(t), i)
#define VIADDC(q, c) _mm256_add_epi32(q, _mm256_set1_epi32(c))
#define VODD(q) _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(q, _mm256_set1_epi32(1)), _mm256_set1_epi32(1)))
#define VFLIP2(y, q) _mm256_xor_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(q, _mm256_set1_epi32(2)), 30)))
#include "act_simd.inc"
#include "act_simd_undef.inc"

AVX2_FN static inline bool v_sincos_ok(__m256 x)
{
    __m256 a = _mm256_andnot_ps(v_set(-0.0f), x);
    /* false for |x| > 8192 and for NaN (both go to libm) */
    return _mm256_movemask_ps(_mm256_cmp_ps(a, v_set(8192.0f), _CMP_LE_OQ)) == 0xff;
}

AVX2_FN static inline __m256i v_tail_mask(int64_t m)
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)m), idx);
}

AVX2_FN static inline __m256 un8(enum unop op, __m256 v, __m256 p0, __m256 p1)
{
    const __m256 zero = _mm256_setzero_ps();
    switch (op) {
    case UN_GELU: return v_gelu(v);
    case UN_GELU_TANH: return v_gelu_tanh(v);
    case UN_SILU: return v_silu(v);
    case UN_SIGMOID: return v_sigmoid(v);
    case UN_MISH: return v_mish(v);
    case UN_ELU:
        /* min(0, v) keeps a NaN v (minps returns its second operand) */
        return _mm256_blendv_ps(_mm256_mul_ps(p0, v_expm1(_mm256_min_ps(zero, v))), v,
                                _mm256_cmp_ps(v, zero, _CMP_GT_OQ));
    case UN_LEAKY_RELU:
        return _mm256_blendv_ps(_mm256_mul_ps(v, p0), v, _mm256_cmp_ps(v, zero, _CMP_GT_OQ));
    case UN_RELU: return _mm256_and_ps(v, _mm256_cmp_ps(v, zero, _CMP_GT_OQ));
    case UN_TANH: return v_tanh(v);
    case UN_EXP: return v_exp(v);
    case UN_ABS: return _mm256_andnot_ps(v_set(-0.0f), v);
    case UN_SQRT: return _mm256_sqrt_ps(v);
    case UN_SQR: return _mm256_mul_ps(v, v);
    case UN_NEG: return _mm256_xor_ps(v, v_set(-0.0f));
    case UN_SCALE: return _mm256_add_ps(_mm256_mul_ps(p0, v), p1); /* no FMA: as scalar */
    case UN_CLAMP: {
        __m256 t = _mm256_blendv_ps(v, p1, _mm256_cmp_ps(v, p1, _CMP_GT_OQ));
        return _mm256_blendv_ps(t, p0, _mm256_cmp_ps(v, p0, _CMP_LT_OQ));
    }
    default: return v; /* UN_SIN / UN_COS handled by the caller */
    }
}

AVX2_FN void elementwise_unary_avx2(enum unop op, float p0, float p1, float *o, const float *x,
                                    int64_t n)
{
    const __m256 vp0 = v_set(p0), vp1 = v_set(p1);
    for (int64_t i = 0; i < n; i += 8) {
        int64_t m = n - i;
        __m256i mask = v_tail_mask(m);
        __m256 v = m >= 8 ? _mm256_loadu_ps(x + i) : _mm256_maskload_ps(x + i, mask);
        __m256 r;
        if (op == UN_SIN || op == UN_COS) {
            if (v_sincos_ok(v)) {
                r = v_sincos(v, op == UN_COS);
            } else {
                float t[8];
                _mm256_storeu_ps(t, v);
                for (int k = 0; k < 8; k++) t[k] = op == UN_COS ? cosf(t[k]) : sinf(t[k]);
                r = _mm256_loadu_ps(t);
            }
        } else {
            r = un8(op, v, vp0, vp1);
        }
        if (m >= 8) _mm256_storeu_ps(o + i, r);
        else _mm256_maskstore_ps(o + i, mask, r);
    }
}

AVX2_FN void elementwise_snake_avx2(float *o, const float *x, float al, float inv, int64_t n)
{
    const __m256 va = v_set(al), vi = v_set(inv);
    for (int64_t i = 0; i < n; i += 8) {
        int64_t m = n - i;
        __m256i mask = v_tail_mask(m);
        __m256 v = m >= 8 ? _mm256_loadu_ps(x + i) : _mm256_maskload_ps(x + i, mask);
        __m256 ax = _mm256_mul_ps(v, va), s;
        if (v_sincos_ok(ax)) {
            s = v_sincos(ax, 0);
        } else {
            float t[8];
            _mm256_storeu_ps(t, ax);
            for (int k = 0; k < 8; k++) t[k] = sinf(t[k]);
            s = _mm256_loadu_ps(t);
        }
        __m256 r = _mm256_add_ps(v, _mm256_mul_ps(vi, _mm256_mul_ps(s, s)));
        if (m >= 8) _mm256_storeu_ps(o + i, r);
        else _mm256_maskstore_ps(o + i, mask, r);
    }
}
#endif
