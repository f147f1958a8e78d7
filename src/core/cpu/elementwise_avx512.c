/* elementwise_avx512.c - AVX-512 kernels of the elementwise group (see
 * elementwise_kernels.h): the flow decoder's activations on 16 lanes and
 * F32 -> Q8_0 rows. Functions carry their own target attribute; the file
 * is compiled for the baseline ISA (and to nothing off x86). */
#include "elementwise_kernels.h"

#if HAVE_X86
#include <immintrin.h>
#include <math.h>

#define AVX512_FN __attribute__((target("avx512f,avx2,fma")))

/* GELU (erf and tanh forms), tanh, Mish, SiLU, sigmoid and Snake's sin on 16 lanes: the
 * same operations in the same order as the AVX2 functions of
 * elementwise_avx2.c (IEEE
 * add/mul/div/fma, round-to-nearest conversions), so every lane gives the
 * AVX2 result bit for bit; only the width differs. */

AVX512_FN static inline __m512 w_set(float f) { return _mm512_set1_ps(f); }

AVX512_FN static inline __m512 w_pow2i(__m512i k)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k, _mm512_set1_epi32(127)), 23));
}

AVX512_FN static inline __m512 w_nan_from(__m512 y, __m512 x)
{
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
}

/* exp, erf, GELU, SiLU, sigmoid and Mish at 16 lanes (act_simd.inc) */
#define AF AVX512_FN
#define VF __m512
#define VI __m512i
#define VM __mmask16
#define A_(name) w_##name
#define VSET w_set
#define VZERO _mm512_setzero_ps()
#define VADD _mm512_add_ps
#define VSUB _mm512_sub_ps
#define VMUL _mm512_mul_ps
#define VDIV _mm512_div_ps
#define VMIN _mm512_min_ps
#define VMAX _mm512_max_ps
#define VFMA _mm512_fmadd_ps
#define VFNMA _mm512_fnmadd_ps
#define VRINT(x) _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VCVT _mm512_cvtps_epi32
#define VISUB _mm512_sub_epi32
#define VISRA1(a) _mm512_srai_epi32(a, 1)
#define VPOW2I w_pow2i
#define VNANFROM w_nan_from
#define W_SIGN _mm512_set1_epi32((int)0x80000000u)
#define VABS(x) _mm512_castsi512_ps(_mm512_andnot_si512(W_SIGN, _mm512_castps_si512(x)))
#define VCOPYSIGN(r, x) \
    _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), _mm512_and_si512(_mm512_castps_si512(x), W_SIGN)))
#define VLT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ)
#define VGT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ)
#define VSEL(m, a, b) _mm512_mask_blend_ps(m, a, b)
#define VTAB8(t, i) _mm512_permutexvar_ps(i, _mm512_castps256_ps512(_mm256_load_ps(t))) /* i < 8 */
#define VIADDC(q, c) _mm512_add_epi32(q, _mm512_set1_epi32(c))
#define VODD(q) _mm512_test_epi32_mask(q, _mm512_set1_epi32(1))
#define VFLIP2(y, q) \
    _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(y), _mm512_slli_epi32(_mm512_and_si512(q, _mm512_set1_epi32(2)), 30)))
#include "act_simd.inc"
#include "act_simd_undef.inc"
#undef W_SIGN

AVX512_FN static inline __m512 un16(enum unop op, __m512 v)
{
    switch (op) {
    case UN_GELU: return w_gelu(v);
    case UN_SILU: return w_silu(v);
    case UN_SIGMOID: return w_sigmoid(v);
    case UN_MISH: return w_mish(v);
    case UN_GELU_TANH: return w_gelu_tanh(v);
    case UN_TANH: return w_tanh(v);
    default: return v; /* not reached: un_has_avx512 */
    }
}

/* one op per loop, so the switch is decided outside the vector loop */
#define UN_LOOP512(OP)                                                                   \
    for (int64_t i = 0; i < n; i += 16) {                                                \
        int64_t m = n - i;                                                               \
        __mmask16 k = m >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << m) - 1);          \
        __m512 r = un16(OP, _mm512_maskz_loadu_ps(k, x + i));                            \
        _mm512_mask_storeu_ps(o + i, k, r);                                              \
    }

AVX512_FN void elementwise_unary_avx512(enum unop op, float *o, const float *x, int64_t n)
{
    switch (op) {
    case UN_GELU: UN_LOOP512(UN_GELU) break;
    case UN_SILU: UN_LOOP512(UN_SILU) break;
    case UN_SIGMOID: UN_LOOP512(UN_SIGMOID) break;
    case UN_MISH: UN_LOOP512(UN_MISH) break;
    case UN_GELU_TANH: UN_LOOP512(UN_GELU_TANH) break;
    case UN_TANH: UN_LOOP512(UN_TANH) break;
    default: break;
    }
}
#undef UN_LOOP512

/* elementwise_snake_avx2 on 16 lanes: the same sin per lane; as there,
 * each aligned 8-lane half holding an argument outside |x| <= 8192 (or a
 * NaN) takes libm's sinf for all its lanes, so results are bit for bit
 * the AVX2 ones */
AVX512_FN void elementwise_snake_avx512(float *o, const float *x, float al, float inv, int64_t n)
{
    const __m512 va = w_set(al), vi = w_set(inv), lim = w_set(8192.0f);
    for (int64_t i = 0; i < n; i += 16) {
        int64_t m = n - i;
        __mmask16 k = m >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << m) - 1);
        __m512 v = _mm512_maskz_loadu_ps(k, x + i), ax = _mm512_mul_ps(v, va);
        __m512 s = w_sincos(ax, 0);
        __mmask16 ok = _mm512_cmp_ps_mask(_mm512_abs_ps(ax), lim, _CMP_LE_OQ);
        if (ok != 0xffff) {
            float t[16], a[16];
            _mm512_storeu_ps(t, s);
            _mm512_storeu_ps(a, ax);
            for (int h = 0; h < 2; h++)
                if ((ok >> (8 * h) & 0xff) != 0xff)
                    for (int l = 8 * h; l < 8 * h + 8; l++) t[l] = sinf(a[l]);
            s = _mm512_loadu_ps(t);
        }
        _mm512_mask_storeu_ps(o + i, k, _mm512_add_ps(v, _mm512_mul_ps(vi, _mm512_mul_ps(s, s))));
    }
}

/* quantize_row_q8_0_ref at the AVX-512 level, byte for byte: per block
 * amax = max |x|, d = amax / 127, id = 1 / d (0 when d is 0), d stored by
 * f32_to_fp16, q = roundf(x * id) (the same products; roundf's half away
 * from zero as truncation plus one step away from zero where the dropped
 * part is >= 0.5, exact since |x * id| <= 127). A block holding a NaN or
 * an infinity goes to quantize_row_q8_0_ref itself. */
AVX512_FN void elementwise_q8_0_row_avx512(const float *x, struct block_q8_0 *y, int64_t n)
{
    const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f), inf = _mm512_set1_ps(INFINITY);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        __m512 v[2] = {_mm512_loadu_ps(x), _mm512_loadu_ps(x + 16)};
        __m512 a0 = _mm512_abs_ps(v[0]), a1 = _mm512_abs_ps(v[1]);
        /* NaN (unordered) or infinite lanes */
        if (_mm512_cmp_ps_mask(a0, inf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(a1, inf, _CMP_NLT_UQ)) {
            quantize_row_q8_0_ref(x, &y[i], QK);
            continue;
        }
        const float d = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1)) / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        const __m512 vid = _mm512_set1_ps(id);
        for (int h = 0; h < 2; h++) {
            __m512 t = _mm512_mul_ps(v[h], vid);
            __m512 r = _mm512_roundscale_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(t, r)), half, _CMP_GE_OQ);
            __m512 step = _mm512_castsi512_ps(
                _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(t), sign), _mm512_castps_si512(one)));
            r = _mm512_mask_add_ps(r, up, r, step);
            _mm_storeu_si128((__m128i *)(y[i].qs + 16 * h), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(r)));
        }
    }
}
#endif
